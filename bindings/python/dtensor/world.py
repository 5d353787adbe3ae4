"""The process group: joined from the launcher's environment (dtrun, torchrun, mpirun, srun) or explicitly."""
import ctypes

from . import _lib
from ._handle import Handle

_default = None


def version():
    return _lib.lib.dt_version_string().decode()


class World(Handle):
    """A world (dt_comm_t): .rank, .size, barrier(). Communicating calls must come from the thread that made it."""
    _destroy = staticmethod(_lib.lib.dt_comm_destroy)

    @property
    def rank(self):
        return _lib.get_i32(_lib.lib.dt_comm_rank, self._h)

    @property
    def size(self):
        return _lib.get_i32(_lib.lib.dt_comm_size, self._h)

    def barrier(self):
        _lib.lib.dt_comm_barrier(self._h)

    def __repr__(self):
        return f"World(rank={self.rank}, size={self.size})" if self._h else "World(closed)"


def _set_default(world):
    global _default
    if _default is None or _default._h is None:
        _default = world
    return world


def init_process_group(backend=None):
    """Joins the job the launcher started (a world of this one process without launcher variables). The first world
    made becomes the default one (DeviceMesh(None, ...) uses it); while it is open, later calls return it.
    backend: None/"ucx" (host) or "nccl"."""
    if _default is not None and _default._h is not None:
        return _default
    h = ctypes.c_void_p()
    _lib.lib.dt_init_from_env(backend.encode() if backend else None, ctypes.byref(h))
    return _set_default(World(h.value))


def init(rank=0, world_size=1, store_host=None, store_port=0, secret=None, insecure=False, backend=None,
         local_rank=-1, store_hosted=False):
    """An explicit world (no environment read): rank 0 hosts the store at store_host:store_port unless
    store_hosted. secret: the store's shared secret (required unless insecure=True)."""
    p = _lib.InitParams()
    _lib.lib.dt_init_params_init(ctypes.byref(p))
    p.rank, p.world_size, p.store_port = rank, world_size, store_port
    p.store_host = store_host.encode() if store_host else None
    p.secret = secret.encode() if secret else None
    p.insecure = 1 if insecure else 0
    p.backend = backend.encode() if backend else None
    p.local_rank, p.store_hosted = local_rank, 1 if store_hosted else 0
    h = ctypes.c_void_p()
    _lib.lib.dt_init(ctypes.byref(p), ctypes.byref(h))
    return _set_default(World(h.value))


def from_nccl(nccl_comm, timeout=None, may_abort=False):
    """A world over a host framework's NCCL communicator (an ncclComm_t, as an int address), which it keeps owning:
    rank, size and GPU are the communicator's; DeviceMesh(world, "cuda:i", ...) issues dtensor's collectives on it.
    dtensor never destroys it (destroy it after this world and everything made from it). timeout: seconds per call
    (None: DT_TIMEOUT_S). may_abort: whether dtensor may ncclCommAbort it on a timeout or an NCCL error (the handle
    is then freed); otherwise dtensor fails its own calls and the owner aborts it. It does not become the default
    world."""
    p = _lib.NcclAdoptParams()
    _lib.lib.dt_nccl_adopt_params_init(ctypes.byref(p))
    p.timeout_s = float(timeout) if timeout is not None else 0.0
    p.may_abort = 1 if may_abort else 0
    h = ctypes.c_void_p()
    _lib.lib.dt_comm_from_nccl(nccl_comm, ctypes.byref(p), ctypes.byref(h))
    return World(h.value)


def _stream_address(stream):
    if stream is None:
        return None
    address = getattr(stream, "cuda_stream", stream)  # torch.cuda.Stream: its cudaStream_t as an int
    if not isinstance(address, int):
        raise TypeError(f"dtensor.set_stream: a stream is a cudaStream_t address (int), an object with .cuda_stream "
                        f"(torch.cuda.Stream) or None, got {type(stream).__name__}")
    return address or None


def set_stream(device, stream):
    """Makes `stream` this thread's current stream of `device` ("cuda:i"): dtensor's work on that GPU from this
    thread (copies, kernels, the order of collectives against the caller's buffers) is queued on it, e.g.
    set_stream("cuda:0", torch.cuda.current_stream()). The new stream waits for the work queued on the previous one.
    None: the legacy default stream. The CPU accepts only None."""
    _lib.lib.dt_set_stream(_lib.to_device(device), _stream_address(stream))


def current_stream(device):
    """This thread's current stream of `device` as a cudaStream_t address (None: the legacy default stream)."""
    out = ctypes.c_void_p()
    _lib.lib.dt_get_stream(_lib.to_device(device), ctypes.byref(out))
    return out.value


def get_world():
    """The default world, joined from the environment on first use."""
    if _default is None or _default._h is None:
        return init_process_group()
    return _default
