// Portability macros shared by host and device code.
#pragma once

#if defined(__CUDACC__)
#define DT_HOST_DEVICE __host__ __device__
#else
#define DT_HOST_DEVICE
#endif
