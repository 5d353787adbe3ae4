"""The libtorch bridge of the compiled hook bodies: dtensor/_torch_bridge.cpp, built against the torch installed.

Note [The libtorch bridge]
The compiled hook bodies (dtensor/_fsdp_hooks.c) call torch through its Python API, so the hooks that run per block
and step pay for Python objects that the work does not need: registering the pre-backward hook on an output's node
(Python's register_prehook makes a hooks dict and a RemovableHandle), the node's calls into it, each parameter's
post-accumulate-grad hook (a Python call with the parameter), reading and clearing .grad, the gradient's DLPack
capsule, and the reduced shards' from_dlpack and .grad assignment; and every call reads the autograd state (grad
mode, whether a backward runs, an output's requires_grad, each shard's _version) through Python calls and
attributes. The bridge does these in C++ against libtorch (a torch::autograd::FunctionPreHook on the node, a
PostAccumulateGradHook on the parameter, DLPack 1.x tensors converted by ATen, .grad through mutable_grad(),
GradMode, the graph task id and the version counter read directly) and calls the C bodies directly, with the GIL
taken only around them. The Python bodies and CUDA parameters do not use it.

libtorch's C++ ABI changes with every torch release, so the wheel cannot carry the bridge: it is compiled on the
machine at the first import of dtensor.torch that finds none for the torch, Python and source at hand (one
translation unit, about 15 s), into a cache folder ($DTENSOR_TORCH_BRIDGE_CACHE, else $XDG_CACHE_HOME/dtensor or
~/.cache/dtensor) under a name keyed by those three, with a file lock so that the ranks of a job build it once.
Without a C++ compiler, torch's headers or Python's, the build fails, a warning says so once, and the bodies go
through torch's Python API as before (slower, the same results). DTENSOR_TORCH_BRIDGE=0 turns the bridge off; a path
loads that file instead.
"""
import fcntl
import hashlib
import importlib.machinery
import importlib.util
import os
import shlex
import subprocess
import sys
import sysconfig

import torch

_HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the dtensor package
SOURCE = os.path.join(_HERE, "_torch_bridge.cpp")
HEADER = os.path.join(_HERE, "_torch_bridge.h")


def _cache_dir():
    explicit = os.environ.get("DTENSOR_TORCH_BRIDGE_CACHE")
    if explicit:
        return explicit
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "dtensor")


def _key():
    """What the built file depends on: the source, torch (its version and where it is), and the Python."""
    h = hashlib.sha256()
    for path in (SOURCE, HEADER):
        with open(path, "rb") as f:
            h.update(f.read())
    h.update(f"{torch.__version__}|{os.path.dirname(torch.__file__)}|{sys.version}".encode())
    return f"torch-{torch.__version__.replace('+', '_')}-{h.hexdigest()[:16]}"


def compile_command(output):
    """The compiler's command line for the bridge (CXX, else c++)."""
    root = os.path.dirname(torch.__file__)
    include = os.path.join(root, "include")
    lib = os.path.join(root, "lib")
    abi = int(getattr(torch._C, "_GLIBCXX_USE_CXX11_ABI", True))
    return (shlex.split(os.environ.get("CXX", "c++")) +
            ["-std=c++20", "-O2", "-fPIC", "-shared", f"-D_GLIBCXX_USE_CXX11_ABI={abi}",
             "-isystem", include, "-isystem", os.path.join(include, "torch", "csrc", "api", "include"),
             "-isystem", sysconfig.get_paths()["include"], SOURCE, "-o", output,
             "-L" + lib, "-ltorch_python", "-ltorch_cpu", "-lc10", "-Wl,-rpath," + lib])


def build(folder=None):
    """The bridge's shared object for this torch and Python, built into the cache folder unless it is there already.
    Returns its path; raises RuntimeError with the compiler's message when the build fails."""
    folder = folder or _cache_dir()
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, f"_torch_bridge-{_key()}.so")
    if os.path.exists(path):
        return path
    with open(os.path.join(folder, "build.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another rank may be building it
        if os.path.exists(path):
            return path
        print(f"dtensor.torch: building the libtorch bridge for torch {torch.__version__} (once; about 15 s) into "
              f"{folder}", file=sys.stderr, flush=True)
        partial = f"{path}.{os.getpid()}.tmp"
        done = subprocess.run(compile_command(partial), capture_output=True, text=True)
        if done.returncode != 0:
            if os.path.exists(partial):
                os.remove(partial)
            raise RuntimeError(f"the compiler exited {done.returncode}: {done.stderr.strip()[-2000:]}")
        os.replace(partial, path)
    return path


def _load_file(path):
    loader = importlib.machinery.ExtensionFileLoader("dtensor._torch_bridge", path)
    spec = importlib.util.spec_from_file_location("dtensor._torch_bridge", path, loader=loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def load():
    """The bridge's table (a capsule for fsdp_bridge), or None: turned off, or not buildable here (warned once)."""
    setting = os.environ.get("DTENSOR_TORCH_BRIDGE", "")
    if setting.lower() in ("0", "off", "no", "false"):
        return None
    try:
        path = setting if setting else build()
        return _load_file(path).table
    except (OSError, ImportError, RuntimeError, subprocess.SubprocessError) as e:
        print(f"dtensor.torch: warning: no libtorch bridge ({e}); the hooks go through torch's Python API (slower, "
              f"the same results). DTENSOR_TORCH_BRIDGE=0 silences this.", file=sys.stderr, flush=True)
        return None
