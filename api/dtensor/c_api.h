/* dtensor's C API: distributed tensors for other languages and frameworks.
 *
 *   #include <dtensor/c_api.h>
 *
 *   dt_comm_t world;
 *   if (dt_init_from_env(NULL, &world) != DT_OK) { fprintf(stderr, "%s\n", dt_last_error()); return 1; }
 *   int64_t sizes[2] = {2, 2};
 *   const char* names[2] = {"dp", "tp"};
 *   dt_mesh_t mesh;
 *   dt_mesh_create(world, dt_cpu(), sizes, 2, names, &mesh);
 *   dt_placement_t spec[2] = {dt_shard(0), dt_replicate()};
 *   dt_tensor_t x;
 *   dt_tensor_distribute(mesh, &full, spec, 2, -1, &x);      // every rank passes the full tensor
 *   ...
 *   dt_tensor_destroy(x); dt_mesh_destroy(mesh); dt_comm_destroy(world);
 *
 * Conventions (every function):
 * - Returns a dt_status_t; DT_OK is 0. On any other status, dt_last_error() holds a message for this thread naming
 *   what was expected and what was given (and, for a distributed failure, the peer). Out-parameters come last and are
 *   written only on success. No C++ exception, abort or crash crosses this API: null pointers, unknown enum codes,
 *   wrong shapes, handles of the wrong kind, destroyed handles and second destroys return a status.
 * - Handles are opaque and never reused: a destroyed handle stays invalid (DT_ERR_INVALID_HANDLE) for the life of
 *   the process. Destroying a handle releases the caller's reference only: a mesh stays alive while tensors on it do.
 * - Threads: handles may be queried from any thread. Calls that communicate (collectives, redistributions, saves,
 *   FSDP calls) must come from the thread that created the world they run on, in the same order on every rank, as
 *   with MPI or NCCL; a call from another thread returns DT_ERR_INVALID_ARGUMENT.
 * - Growable parameter structs start with `struct_size`: set it to sizeof(the struct) (the *_init() helpers do);
 *   fields past the size a caller knows take their defaults, so newer libraries accept older callers.
 * - Arrays are (pointer, count) pairs; strings are NUL-terminated UTF-8 and are copied before the call returns.
 *
 * The header is C99 and C++ compatible. Thread-safety and ownership are stated per function where they differ.
 */
#ifndef DTENSOR_C_API_H_
#define DTENSOR_C_API_H_

#include <dtensor/dlpack.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32)
#define DT_API
#else
#define DT_API __attribute__((visibility("default")))
#endif

/* ---- version and errors ---------------------------------------------------------------------------------------- */

/* DT_C_API_VERSION_MAJOR, _MINOR, _PATCH and _STRING: the version of this header, which is the project's version
 * (meson.build; the header is generated from it). */
#include <dtensor/version.h>

/* The library's C API version, (major << 16) | (minor << 8) | patch. A caller compiled against major M works with a
 * library of major M and any minor at least its own. */
DT_API uint32_t dt_version(void);
/* The same version as text, DT_C_API_VERSION_STRING of the library's header (static storage). */
DT_API const char* dt_version_string(void);

typedef enum dt_status_t {
  DT_OK = 0,
  DT_ERR_INVALID_ARGUMENT = 1, /* a bad value: null pointer, unknown code, wrong shape, mismatched ranks */
  DT_ERR_UNSUPPORTED = 2,      /* valid, but not in this build or on this device */
  DT_ERR_TIMEOUT = 3,          /* a deadline passed (DT_TIMEOUT_S); the message names the peers missing */
  DT_ERR_REMOTE = 4,           /* a peer failed or died; the message names it */
  DT_ERR_SYSTEM = 5,           /* the operating system refused (files, sockets, memory) */
  DT_ERR_CUDA = 6,             /* a CUDA or NCCL error */
  DT_ERR_INTERNAL = 7,         /* a bug in dtensor: please report the message */
  DT_ERR_INVALID_HANDLE = 8    /* null, destroyed, or a handle of another kind */
} dt_status_t;

/* A static name for a status ("DT_ERR_TIMEOUT"); "unknown status" for a code not listed. Never null. */
DT_API const char* dt_status_string(dt_status_t status);
/* The detailed message of the last failed call on this thread ("" when none). Valid until the next call on this
 * thread; copy it to keep it. Never null. */
DT_API const char* dt_last_error(void);

/* ---- plain values ---------------------------------------------------------------------------------------------- */

typedef enum dt_dtype_t {
  DT_FLOAT32 = 0,
  DT_FLOAT64 = 1,
  DT_FLOAT16 = 2,
  DT_BFLOAT16 = 3,
  DT_INT8 = 4,
  DT_INT32 = 5,
  DT_INT64 = 6,
  DT_UINT8 = 7,
  DT_BOOL = 8
} dt_dtype_t;

/* Device types use DLPack's codes. */
typedef enum dt_device_type_t { DT_DEVICE_CPU = 1, DT_DEVICE_CUDA = 2 } dt_device_type_t;
typedef struct dt_device_t {
  int32_t type;  /* dt_device_type_t */
  int32_t index; /* 0 for the CPU */
} dt_device_t;

typedef enum dt_reduce_op_t {
  DT_REDUCE_SUM = 0,
  DT_REDUCE_AVG = 1,
  DT_REDUCE_MAX = 2,
  DT_REDUCE_MIN = 3,
  DT_REDUCE_PRODUCT = 4
} dt_reduce_op_t;

typedef enum dt_placement_kind_t { DT_REPLICATE = 0, DT_SHARD = 1, DT_PARTIAL = 2 } dt_placement_kind_t;

/* One placement per mesh dim. Shard(dim) splits tensor dim `dim` (negative counts from the end); when several mesh
 * dims shard one tensor dim, `order` is this mesh dim's position among them (0 = outermost, split first), the `[k]`
 * of the text form "S(0)[1],S(0)[0]"; -1 everywhere means the default (ascending mesh dims). Partial(op) holds a
 * contribution per coordinate whose reduction is the value. */
typedef struct dt_placement_t {
  int32_t kind;      /* dt_placement_kind_t */
  int32_t dim;       /* DT_SHARD: the tensor dim */
  int32_t reduce_op; /* DT_PARTIAL: dt_reduce_op_t */
  int32_t order;     /* DT_SHARD: position in its tensor dim's shard order, or -1 */
} dt_placement_t;

/* A local buffer: host or device memory the caller owns, row-major unless strides (in elements) are given. */
typedef struct dt_buffer_t {
  void* data;
  int32_t dtype; /* dt_dtype_t */
  int32_t ndim;
  const int64_t* shape;
  const int64_t* strides; /* NULL: contiguous */
  dt_device_t device;
} dt_buffer_t;

/* Parses the text form of placements ("S(0),R", "S(0)[1],S(0)[0]", "P(sum),S(1)"; see dtplan) into out[0..cap);
 * *n receives the count. tensor_ndim >= 0 wraps negative dims and range-checks them; -1 skips that. */
DT_API dt_status_t dt_placements_parse(const char* text, int32_t tensor_ndim, dt_placement_t* out, int32_t cap,
                                       int32_t* n);
/* The text form of placements into buf (NUL-terminated, truncated to cap); *needed receives the full length + 1. */
DT_API dt_status_t dt_placements_format(const dt_placement_t* placements, int32_t n, char* buf, size_t cap,
                                        size_t* needed);

/* ---- communicators --------------------------------------------------------------------------------------------- */

typedef struct dt_comm_s* dt_comm_t;

/* Joins the job the launcher started (dtrun, torchrun, mpirun, srun: rank, size and the store from the
 * environment), or a world of this one process when no launcher variables are set. backend: NULL or "ucx" (host
 * tensors, and CUDA tensors staged through host memory), "nccl" (CUDA). Collective over the job. The world becomes
 * the default one; its creating thread is the one that may communicate on it. */
DT_API dt_status_t dt_init_from_env(const char* backend, dt_comm_t* out);

typedef struct dt_init_params_t {
  size_t struct_size;
  int32_t rank;
  int32_t world_size;
  const char* store_host; /* rank 0 hosts the store here unless store_hosted; NULL: "127.0.0.1" */
  int32_t store_port;     /* 0: 29500 */
  const char* secret;     /* the store's shared secret (HMAC); required unless insecure is set */
  int32_t insecure;       /* 1: the well-known insecure secret (single-user machines, tests) */
  const char* backend;    /* NULL: "ucx" */
  int32_t local_rank;     /* -1: unknown (picks the GPU for "nccl") */
  int32_t store_hosted;   /* 1: someone else hosts the store (a launcher) */
} dt_init_params_t;
/* Fills defaults: struct_size, rank 0, world_size 1, local_rank -1, everything else 0 / NULL. */
DT_API void dt_init_params_init(dt_init_params_t* params);
/* Explicit init: the same without reading the environment. */
DT_API dt_status_t dt_init(const dt_init_params_t* params, dt_comm_t* out);

DT_API dt_status_t dt_comm_rank(dt_comm_t comm, int32_t* rank);
DT_API dt_status_t dt_comm_size(dt_comm_t comm, int32_t* size);
/* Collective: returns when every rank has entered it. */
DT_API dt_status_t dt_comm_barrier(dt_comm_t comm);
/* Releases the handle; the process group ends when the last world, mesh and tensor using it are destroyed. */
DT_API dt_status_t dt_comm_destroy(dt_comm_t comm);

/* ---- a host framework's NCCL communicator and CUDA streams ----------------------------------------------------- */

typedef struct dt_nccl_adopt_params_t {
  size_t struct_size;
  double timeout_s;  /* deadline of each dtensor call on the communicator; <= 0: DT_TIMEOUT_S's value */
  int32_t may_abort; /* 1: dtensor may ncclCommAbort the communicator on a timeout or an NCCL error (the caller's
                        handle is then freed); 0: dtensor fails its own calls only and the caller aborts it */
} dt_nccl_adopt_params_t;
/* Fills defaults: struct_size, timeout_s 0, may_abort 0. */
DT_API void dt_nccl_adopt_params_init(dt_nccl_adopt_params_t* params);
/* A world over nccl_comm, an ncclComm_t the caller created and keeps owning (params may be NULL: the defaults):
 * rank, size and GPU are the communicator's; dt_mesh_create on it with that GPU's device issues dtensor's
 * collectives on it (a mesh's per-dim communicators are splits dtensor owns). dtensor never finalizes or destroys
 * it: the caller destroys it after this world and every mesh and tensor made from it. The caller must not use the
 * communicator from another thread during a dtensor call (NCCL communicators are not thread-safe). Not collective;
 * the world does not become the default one. DT_ERR_UNSUPPORTED when dtensor was built without NCCL;
 * DT_ERR_INVALID_ARGUMENT for a NULL or failed communicator. */
DT_API dt_status_t dt_comm_from_nccl(void* nccl_comm, const dt_nccl_adopt_params_t* params, dt_comm_t* out);

/* Makes cuda_stream (a cudaStream_t of `device`; NULL: the legacy default stream) the calling thread's current
 * stream of `device`: dtensor's work on that device from this thread (copies, kernels, and the order of collectives
 * against the caller's buffers) is queued on it, so that it interleaves with the host framework's work on that
 * stream. The new stream first waits for the work queued on the previous one (the host does not wait). Thread-local;
 * a CPU device accepts only NULL; DT_ERR_UNSUPPORTED when the device cannot be used. */
DT_API dt_status_t dt_set_stream(dt_device_t device, void* cuda_stream);
/* The calling thread's current stream of `device` (NULL: the legacy default stream). */
DT_API dt_status_t dt_get_stream(dt_device_t device, void** cuda_stream);
/* Makes cuda_stream (a cudaStream_t of `device`; NULL or DLPack's 1: the legacy default stream, 2: the per-thread
 * default stream) wait for the work queued so far on the calling thread's current stream of `device`, on the device:
 * the host does not wait. What a DLPack producer does for its consumer's stream before handing a CUDA block out. A
 * CPU device accepts only NULL (and waits for nothing). */
DT_API dt_status_t dt_stream_wait(dt_device_t device, void* cuda_stream);

/* ---- meshes ---------------------------------------------------------------------------------------------------- */

typedef struct dt_mesh_s* dt_mesh_t;

DT_API dt_device_t dt_cpu(void);
DT_API dt_device_t dt_cuda(int32_t index);

/* A mesh of prod(sizes) ranks of `world` (ranks 0..n-1 in row-major order), one communicator per dim. names may be
 * NULL (dims unnamed) or hold ndim distinct non-empty names. Collective over the world. */
DT_API dt_status_t dt_mesh_create(dt_comm_t world, dt_device_t device, const int64_t* sizes, int32_t ndim,
                                  const char* const* names, dt_mesh_t* out);
/* The sub-mesh of the named dims through this rank (mesh["tp"]); no communication. */
DT_API dt_status_t dt_mesh_sub(dt_mesh_t mesh, const char* const* names, int32_t n, dt_mesh_t* out);
/* The named dims merged into one dim called new_name (NULL: the names joined by '_'). */
DT_API dt_status_t dt_mesh_flatten(dt_mesh_t mesh, const char* const* names, int32_t n, const char* new_name,
                                   dt_mesh_t* out);
DT_API dt_status_t dt_mesh_ndim(dt_mesh_t mesh, int32_t* ndim);
/* sizes[0..ndim) and this rank's coordinate (-1s when it is not a member) into caller arrays of cap entries. */
DT_API dt_status_t dt_mesh_shape(dt_mesh_t mesh, int64_t* sizes, int32_t cap);
DT_API dt_status_t dt_mesh_coordinate(dt_mesh_t mesh, int64_t* coord, int32_t cap);
DT_API dt_status_t dt_mesh_destroy(dt_mesh_t mesh);

/* ---- DTensors -------------------------------------------------------------------------------------------------- */

typedef struct dt_tensor_s* dt_tensor_t;
typedef struct dt_work_s* dt_work_t;

enum {
  DT_COPY = 0,     /* the library copies the local buffer */
  DT_ZERO_COPY = 1 /* the tensor uses the buffer in place (it must be contiguous and outlive the tensor; `release`
                      below is called when the library no longer needs it) */
};

typedef struct dt_from_local_params_t {
  size_t struct_size;
  int32_t mode;                /* DT_COPY or DT_ZERO_COPY */
  const int64_t* global_shape; /* NULL: inferred exactly from every rank's local shape (collective) */
  int32_t global_ndim;
  int32_t run_check;              /* 1: exchange and check every rank's local shape against the layout */
  void (*release)(void* context); /* DT_ZERO_COPY: called once, from any thread, when the buffer is no longer used
                                     (may be NULL) */
  void* release_context;
} dt_from_local_params_t;
DT_API void dt_from_local_params_init(dt_from_local_params_t* params);

/* A DTensor from this rank's block (`local`), laid out by placements (one per mesh dim) on mesh: PyTorch's
 * DTensor.from_local. params may be NULL (copy, inferred global shape). */
DT_API dt_status_t dt_tensor_from_local(dt_mesh_t mesh, const dt_buffer_t* local, const dt_placement_t* placements,
                                        int32_t n, const dt_from_local_params_t* params, dt_tensor_t* out);
/* PyTorch's distribute_tensor: every member passes `full` (src_rank = -1: each slices its own block, no
 * communication), or the global rank src_rank sends each rank its block (the others' data is not read; they may pass
 * a buffer with data NULL and the right dtype and shape). Collective over the mesh. */
DT_API dt_status_t dt_tensor_distribute(dt_mesh_t mesh, const dt_buffer_t* full, const dt_placement_t* placements,
                                        int32_t n, int32_t src_rank, dt_tensor_t* out);

DT_API dt_status_t dt_tensor_dtype(dt_tensor_t t, int32_t* dtype);
DT_API dt_status_t dt_tensor_ndim(dt_tensor_t t, int32_t* ndim);
/* Global shape, this rank's block shape and its offset in the global tensor, into caller arrays of cap entries. */
DT_API dt_status_t dt_tensor_shape(dt_tensor_t t, int64_t* shape, int32_t cap);
DT_API dt_status_t dt_tensor_local_shape(dt_tensor_t t, int64_t* shape, int32_t cap);
DT_API dt_status_t dt_tensor_local_offset(dt_tensor_t t, int64_t* offset, int32_t cap);
/* The placements (one per mesh dim, with explicit orders) into out[0..cap); *n receives the mesh ndim. */
DT_API dt_status_t dt_tensor_placements(dt_tensor_t t, dt_placement_t* out, int32_t cap, int32_t* n);
/* The mesh the tensor lives on (a new handle to destroy). */
DT_API dt_status_t dt_tensor_mesh(dt_tensor_t t, dt_mesh_t* out);
/* This rank's block in place: a pointer to its contiguous data (host or device), valid while the tensor lives.
 * Writing through it changes the tensor. */
DT_API dt_status_t dt_tensor_local_data(dt_tensor_t t, void** data);
/* Copies this rank's block into dst (its dtype and shape must be the local shape's). */
DT_API dt_status_t dt_tensor_to_local(dt_tensor_t t, const dt_buffer_t* dst);
/* The whole tensor into dst on every member (a redistribution to Replicate; collective over the mesh). */
DT_API dt_status_t dt_tensor_full(dt_tensor_t t, const dt_buffer_t* dst);
/* A new tensor with other placements (collective over the mesh; the plan is cached per (from, to) spec). */
DT_API dt_status_t dt_tensor_redistribute(dt_tensor_t t, const dt_placement_t* placements, int32_t n, dt_tensor_t* out);
/* The same, asynchronous: the first collective is in flight when it returns; dt_work_wait yields the tensor. Ranks
 * must wait on redistributions of one mesh in the same order. */
DT_API dt_status_t dt_tensor_redistribute_async(dt_tensor_t t, const dt_placement_t* placements, int32_t n,
                                                dt_work_t* out);
/* A human-readable description ("DTensor(shape [8, 6], f32, S(0),R on mesh[2, 2](dp, tp))") into buf. */
DT_API dt_status_t dt_tensor_describe(dt_tensor_t t, char* buf, size_t cap, size_t* needed);
DT_API dt_status_t dt_tensor_destroy(dt_tensor_t t);

/* ---- ops ------------------------------------------------------------------------------------------------------- */

/* A named op parameter (dims, keepdim, eps, a scalar ...). */
typedef enum dt_param_kind_t {
  DT_PARAM_BOOL = 0,
  DT_PARAM_INT = 1,
  DT_PARAM_DOUBLE = 2,
  DT_PARAM_INTS = 3,
  DT_PARAM_STRING = 4
} dt_param_kind_t;
typedef struct dt_op_param_t {
  const char* name;
  int32_t kind;        /* dt_param_kind_t */
  int64_t i;           /* BOOL (0/1), INT */
  double d;            /* DOUBLE */
  const int64_t* ints; /* INTS */
  int32_t n_ints;
  const char* s; /* STRING */
} dt_op_param_t;

/* Runs a registered DTensor op ("add", "mul", "matmul", "sum", "softmax", ...; dt_ops_list names them) with sharding
 * propagation: the output placements follow from the inputs' (inputs are redistributed when the op needs it).
 * Collective over the inputs' mesh when it communicates. outputs[0..cap) receive new handles, *n_out their count. */
DT_API dt_status_t dt_tensor_op(const char* op, const dt_tensor_t* inputs, int32_t n_inputs,
                                const dt_op_param_t* params, int32_t n_params, dt_tensor_t* outputs, int32_t cap,
                                int32_t* n_out);
/* The registered op names, comma-separated, into buf. */
DT_API dt_status_t dt_ops_list(char* buf, size_t cap, size_t* needed);

/* ---- work ------------------------------------------------------------------------------------------------------ */

/* Waits for an asynchronous call; for a redistribution, *out receives the tensor (out may be NULL for calls without
 * a result). Collective like the call it finishes. A work may be waited on once. */
DT_API dt_status_t dt_work_wait(dt_work_t work, dt_tensor_t* out);
/* Whether the work's in-flight part is done (*done = 1), without blocking or communicating. */
DT_API dt_status_t dt_work_test(dt_work_t work, int32_t* done);
/* Releases the handle (waits, without communicating, for a save's local part; a redistribution not waited on is
 * abandoned and its ranks must not wait on it). */
DT_API dt_status_t dt_work_destroy(dt_work_t work);

/* ---- layouts and plans (no communication, no world needed) --------------------------------------------------- */

/* The block of the rank at `coord` for a tensor of `shape` laid out by placements on a mesh of mesh_sizes:
 * local_shape and offset receive ndim entries each. */
DT_API dt_status_t dt_layout_block(const int64_t* shape, int32_t ndim, const int64_t* mesh_sizes, int32_t mesh_ndim,
                                   const dt_placement_t* placements, const int64_t* coord, int64_t* local_shape,
                                   int64_t* offset);
/* The redistribution plan from `from` to `to` as text (steps, collectives, bytes, cost; what dtplan prints). */
DT_API dt_status_t dt_plan_describe(const int64_t* shape, int32_t ndim, const int64_t* mesh_sizes, int32_t mesh_ndim,
                                    const dt_placement_t* from, const dt_placement_t* to, int32_t dtype, char* buf,
                                    size_t cap, size_t* needed);

/* ---- DLPack ---------------------------------------------------------------------------------------------------- */

enum {
  DT_DLPACK_COPY = 1,     /* export: a copy of the block (the tensor may change afterwards); import: copy too */
  DT_DLPACK_READ_ONLY = 2 /* export: mark the view read-only (DLPACK_FLAG_BITMASK_READ_ONLY) */
};
/* This rank's block as a DLPack tensor (DLPack 1.x, DLManagedTensorVersioned), zero copy unless DT_DLPACK_COPY: the
 * returned tensor keeps the storage alive until its deleter runs (call it exactly once, e.g. through the consumer:
 * torch.from_dlpack, numpy.from_dlpack). */
DT_API dt_status_t dt_tensor_to_dlpack(dt_tensor_t t, uint32_t flags, DLManagedTensorVersioned** out);
/* A DTensor whose local block is a DLPack tensor: takes ownership of `local` (its deleter is called when the
 * DTensor no longer needs it, also on failure); zero copy unless DT_DLPACK_COPY or the tensor is not contiguous or
 * is read-only (then copied). */
DT_API dt_status_t dt_tensor_from_dlpack(dt_mesh_t mesh, DLManagedTensorVersioned* local,
                                         const dt_placement_t* placements, int32_t n,
                                         const dt_from_local_params_t* params, uint32_t flags, dt_tensor_t* out);

/* ---- checkpoints ----------------------------------------------------------------------------------------------- */

/* Saves named tensors (and metadata: a JSON object of scalars, or NULL) into dir: dtensor/checkpoint/checkpoint.h,
 * collective over the tensors' world. out_work NULL: returns when the checkpoint is complete on disk; otherwise
 * returns once the blocks are copied aside and *out_work finishes the save (dt_work_wait, collective). */
DT_API dt_status_t dt_checkpoint_save(const char* dir, const char* const* names, const dt_tensor_t* tensors, int32_t n,
                                      const char* metadata_json, dt_work_t* out_work);
/* Loads into the given tensors in place, from any layout. strict: names must match both ways. metadata_json
 * receives the checkpoint's metadata as a JSON object (truncated to cap; *needed the full length + 1); both may be
 * NULL. */
DT_API dt_status_t dt_checkpoint_load(const char* dir, const char* const* names, const dt_tensor_t* tensors, int32_t n,
                                      int32_t strict, char* metadata_json, size_t cap, size_t* needed);

/* ---- the FSDP engine ------------------------------------------------------------------------------------------- */

typedef struct dt_fsdp_group_s* dt_fsdp_group_t;

typedef struct dt_fsdp_options_t {
  size_t struct_size;
  int32_t reshard_after_forward; /* 1 (default): free after forward; 0: keep; k > 1: keep a 1/k share */
  int32_t param_dtype;           /* -1 (default): the parameters' own; else dt_dtype_t of the gathered parameters */
  int32_t reduce_dtype;          /* -1: param_dtype; else the dtype gradients are reduced in */
  double gradient_divide_factor; /* 0 (default): average over the data-parallel ranks */
  int32_t cpu_offload;           /* 1: shards and gradients live in host memory (CUDA meshes) */
} dt_fsdp_options_t;
DT_API void dt_fsdp_options_init(dt_fsdp_options_t* options);

/* A parameter group (one fully_shard call; PyTorch's FSDPParamGroup) over `params` (whole or tensor-parallel
 * DTensors, replicated over the mesh's dims), sharded on dim 0 over `mesh`: 1-d (FSDP) or 2-d (HSDP: replicate,
 * shard). The shards are made here (a local slice). names (for messages) may be NULL. */
DT_API dt_status_t dt_fsdp_group_create(dt_mesh_t mesh, const char* name, const char* const* param_names,
                                        const dt_tensor_t* params, int32_t n, const dt_fsdp_options_t* options,
                                        dt_fsdp_group_t* out);
/* The lifecycle, in the order a step makes the calls (fsdp/param_group.h): unshard (async: the all-gather is in
 * flight when it returns; prefetching is calling it early for the next group), wait_unshard, reshard (post_forward:
 * keep the reshard_after_forward share), accumulate_grad per parameter, reduce_grads, wait_reduce. */
DT_API dt_status_t dt_fsdp_group_unshard(dt_fsdp_group_t g, int32_t async);
DT_API dt_status_t dt_fsdp_group_wait_unshard(dt_fsdp_group_t g);
DT_API dt_status_t dt_fsdp_group_reshard(dt_fsdp_group_t g, int32_t post_forward);
/* Parameter i's persistent shard (what the optimizer updates), and its gathered value (valid between wait_unshard
 * and reshard), as new handles. The gathered value's storage object is the same every step, but reshard returns its
 * memory to the pool and the next unshard may fill it at another address: take the data pointer (or a DLPack view)
 * after each wait_unshard, and rebuild views saved for backward (the Python package's dtensor.torch does, through
 * saved_tensors_hooks: bindings/python/dtensor/torch/_saved_tensors.py). */
DT_API dt_status_t dt_fsdp_group_sharded_param(dt_fsdp_group_t g, int32_t i, dt_tensor_t* out);
DT_API dt_status_t dt_fsdp_group_unsharded_param(dt_fsdp_group_t g, int32_t i, dt_tensor_t* out);
/* Parameter i's unsharded gradient (the layout of its gathered value), summed into the step's. */
DT_API dt_status_t dt_fsdp_group_accumulate_grad(dt_fsdp_group_t g, int32_t i, dt_tensor_t grad);
DT_API dt_status_t dt_fsdp_group_reduce_grads(dt_fsdp_group_t g);
DT_API dt_status_t dt_fsdp_group_wait_reduce(dt_fsdp_group_t g);
/* Parameter i's reduced gradient shard (after wait_reduce; *out NULL when it got none). */
DT_API dt_status_t dt_fsdp_group_sharded_grad(dt_fsdp_group_t g, int32_t i, dt_tensor_t* out);
DT_API dt_status_t dt_fsdp_group_set_requires_gradient_sync(dt_fsdp_group_t g, int32_t on);
/* The divide factor of the next reductions (as options.gradient_divide_factor: 0 averages over the data-parallel
 * ranks, 1 sums; PyTorch FSDP2's set_gradient_divide_factor). Waits for a reduction in flight first. */
DT_API dt_status_t dt_fsdp_group_set_gradient_divide_factor(dt_fsdp_group_t g, double factor);

/* The hand-offs a host framework's hooks make every step, batched per group and without tensor handles (the
 * Python package's dtensor.torch makes them; Note [Hook hand-offs] in bindings/python/dtensor/torch/_param_group.py):
 * - unsharded_data: after wait_unshard, the data address of every parameter's gathered value (out: n = the group's
 *   size entries), so that views are rebuilt only when a gather moved them;
 * - export: every parameter's gathered value (DT_FSDP_UNSHARDED_PARAMS, after wait_unshard) or reduced gradient
 *   shard (DT_FSDP_SHARDED_GRADS, after wait_reduce; NULL where it got none) as a DLPack tensor the caller owns;
 * - accumulate_grad_dlpack: parameter i's unsharded gradient as this rank's block (its gathered value's local
 *   shape), taken over zero copy where contiguous (its deleter runs on every path). */
typedef enum { DT_FSDP_UNSHARDED_PARAMS = 0, DT_FSDP_SHARDED_GRADS = 1 } dt_fsdp_export_t;
DT_API dt_status_t dt_fsdp_group_unsharded_data(dt_fsdp_group_t g, void** out, int32_t n);
DT_API dt_status_t dt_fsdp_group_export(dt_fsdp_group_t g, int32_t what, DLManagedTensorVersioned** out, int32_t n);
DT_API dt_status_t dt_fsdp_group_accumulate_grad_dlpack(dt_fsdp_group_t g, int32_t i, DLManagedTensorVersioned* grad);

typedef struct dt_fsdp_memory_t {
  size_t struct_size;
  int64_t sharded_bytes, unsharded_bytes, unsharded_grad_bytes, gather_buffer_bytes, reduce_buffer_bytes;
} dt_fsdp_memory_t;
DT_API dt_status_t dt_fsdp_group_memory(dt_fsdp_group_t g, dt_fsdp_memory_t* out);
DT_API dt_status_t dt_fsdp_group_destroy(dt_fsdp_group_t g);

/* ---- communication per scope (CommDebugMode) ------------------------------------------------------------------- */

/* PyTorch's CommDebugMode: counts and sizes the collectives the calling thread issues while the mode lives, per kind,
 * under every scope entered (a framework enters its modules' names from its hooks) and under "Global"; forward
 * (backward = 0), backward (1) and calls outside any scope apart. Sizes are per-rank input bytes. */
typedef struct dt_comm_debug_s* dt_comm_debug_t;
DT_API dt_status_t dt_comm_debug_create(dt_comm_debug_t* out);
/* Declares a scope's place in the table (its depth under the root, from 1) before it is entered; optional. */
DT_API dt_status_t dt_comm_debug_declare(dt_comm_debug_t mode, const char* scope, int32_t depth);
DT_API dt_status_t dt_comm_debug_enter(dt_comm_debug_t mode, const char* scope, int32_t backward);
/* DT_ERR_INVALID_ARGUMENT for a scope that is not active in that phase. */
DT_API dt_status_t dt_comm_debug_exit(dt_comm_debug_t mode, const char* scope, int32_t backward);
/* {"scopes": [{"name", "depth", "forward": {"all_reduce": {"calls", "bytes"}}, "backward": ..., "outside": ...}]}. */
DT_API dt_status_t dt_comm_debug_json(dt_comm_debug_t mode, char* buf, size_t cap, size_t* needed);
/* The table as text, scopes indented by depth. */
DT_API dt_status_t dt_comm_debug_text(dt_comm_debug_t mode, char* buf, size_t cap, size_t* needed);
DT_API dt_status_t dt_comm_debug_destroy(dt_comm_debug_t mode);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* DTENSOR_C_API_H_ */
