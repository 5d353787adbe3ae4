#!/usr/bin/env python3
"""The dtensor Python package (bindings/python, over the C API), on 1, 2 and 4 processes (issue #18).

Each test launches `dtrun --nproc-per-node N python3 dtensor_cases.py CASE`: meshes, every placement kind (uneven,
empty and nested shards), redistribution (sync and async, Partial), ops, zero copy both ways (pointer identity),
DLPack, a checkpoint saved on 2 ranks and loaded on 4, the FSDP group, errors, the compiled DTensor base against
ctypes (fast_paths: the suite runs once with _speedups, once with DTENSOR_NO_SPEEDUPS=1); with PyTorch: DLPack with
torch tensors and examples/python/torch_fsdp.py on 2 processes (losses within 1e-5 of plain PyTorch).

Run by meson (suite 'python'): it re-executes itself under the build folder's py-venv (DT_PY_VENV) and runs pytest
on itself; exit 77 (skipped, with the reason) when numpy or pytest is missing. Environment (meson sets it): DTRUN,
DTENSOR_LIBRARY, DT_PY_SOURCE (bindings/python), DT_TORCH_FSDP (the example). The PyTorch tests run under
DT_TORCH_PYTHON (a python with torch and numpy), else this interpreter when it imports torch; otherwise they are
skipped with the reason printed (-rs).
"""
import os
import shutil
import socket
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


if __name__ == "__main__":
    sys.path.insert(0, HERE)
    from py_venv import reexec_in_venv, skip_unless_importable
    reexec_in_venv()
    skip_unless_importable("numpy", "pytest")
    import pytest
    sys.exit(pytest.main([os.path.abspath(__file__), "-v", "-rs", "-p", "no:cacheprovider"]))

import pytest  # noqa: E402

DTRUN = os.environ.get("DTRUN", "")
CASES = os.path.join(HERE, "dtensor_cases.py")


def _torch_python():
    cand = os.environ.get("DT_TORCH_PYTHON") or sys.executable
    ok = subprocess.run([cand, "-c", "import torch, numpy"], capture_output=True).returncode == 0
    return cand if ok else None


TORCH_PYTHON = _torch_python()
needs_torch = pytest.mark.skipif(TORCH_PYTHON is None, reason="PyTorch is not importable (set DT_TORCH_PYTHON to a "
                                 "python with torch and numpy to run the PyTorch tests)")


def launch(nproc, args, python=None, timeout=300):
    if not DTRUN or not os.environ.get("DTENSOR_LIBRARY"):
        pytest.skip("DTRUN and DTENSOR_LIBRARY are not set (meson sets them)")
    env = dict(os.environ)
    src = os.environ.get("DT_PY_SOURCE", os.path.join(HERE, "..", "..", "bindings", "python"))
    env["PYTHONPATH"] = src + os.pathsep + env.get("PYTHONPATH", "")
    env.setdefault("OPENBLAS_NUM_THREADS", "1")
    cmd = [DTRUN, "--nproc-per-node", str(nproc), "--tag-output", "--timeout", "60", python or sys.executable, *args]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    out = r.stdout + r.stderr
    assert r.returncode == 0, f"{' '.join(cmd)} exited with {r.returncode}:\n{out}"
    return out


@pytest.mark.parametrize("nproc", [1, 2, 4])
@pytest.mark.parametrize("case", ["meshes", "placements", "redistribute", "ops", "zero_copy", "dlpack", "fsdp",
                                  "errors", "comm_debug"])
def test_case(case, nproc):
    out = launch(nproc, [CASES, case])
    assert out.count(f"{case}: ok") == nproc, out


@pytest.mark.parametrize("nproc", [1, 2])
def test_fast_paths(nproc):
    """The compiled DTensor base against ctypes (values, errors, close, with, GC), on the path the env selects."""
    out = launch(nproc, [CASES, "fast_paths"])
    assert out.count("fast_paths: ok") == nproc, out


def test_checkpoint_2_to_4_ranks():
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "ckpt")
        launch(2, [CASES, "ckpt_save", path])
        out = launch(4, [CASES, "ckpt_load", path])
        assert out.count("ckpt_load: ok") == 4, out


def test_explicit_init_without_a_launcher():
    port = free_ports(1)[0]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DT_", "OMPI_", "PMI", "SLURM_"))
           and k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")}
    src = os.environ.get("DT_PY_SOURCE", os.path.join(HERE, "..", "..", "bindings", "python"))
    env["PYTHONPATH"] = src + os.pathsep + env.get("PYTHONPATH", "")
    procs = [subprocess.Popen([sys.executable, CASES, "explicit_init", str(r), "2", str(port)], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for r in range(2)]
    outs = [p.communicate(timeout=300)[0] for p in procs]
    assert all(p.returncode == 0 for p in procs), "\n".join(outs)
    assert all("explicit_init: ok" in o for o in outs), "\n".join(outs)


@pytest.mark.skipif(shutil.which("mpirun") is None, reason="mpirun is not installed")
def test_under_mpirun():
    # A free store port: the suite runs twice at once (python_package, python_package_ctypes), and the default one
    # (29500) would be taken by the other run's.
    env = dict(os.environ, DT_STORE_SECRET="python-package-test-" + str(os.getpid()),
               DT_MASTER_PORT=str(free_ports(1)[0]))
    src = os.environ.get("DT_PY_SOURCE", os.path.join(HERE, "..", "..", "bindings", "python"))
    env["PYTHONPATH"] = src + os.pathsep + env.get("PYTHONPATH", "")
    cmd = ["mpirun", "--oversubscribe", "-x", "DT_STORE_SECRET", "-x", "DT_MASTER_PORT", "-x", "PYTHONPATH", "-x",
           "DTENSOR_LIBRARY", "-n", "2", sys.executable, CASES, "redistribute"]
    if os.geteuid() == 0:
        cmd.insert(1, "--allow-run-as-root")
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and (r.stdout + r.stderr).count("redistribute: ok") == 2, r.stdout + r.stderr


@needs_torch
def test_under_torchrun():
    torch_port, dt_port = free_ports(2)  # torchrun's store and dtensor's, distinct
    env = dict(os.environ, DT_STORE_SECRET="python-package-test-" + str(os.getpid()), DT_MASTER_PORT=str(dt_port))
    src = os.environ.get("DT_PY_SOURCE", os.path.join(HERE, "..", "..", "bindings", "python"))
    env["PYTHONPATH"] = src + os.pathsep + env.get("PYTHONPATH", "")
    cmd = [TORCH_PYTHON, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port", str(torch_port),
           CASES, "ops"]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and (r.stdout + r.stderr).count("ops: ok") == 2, r.stdout + r.stderr


def free_ports(n):
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


@needs_torch
@pytest.mark.parametrize("nproc", [1, 2, 4])
def test_torch_dlpack(nproc):
    out = launch(nproc, [CASES, "torch"], python=TORCH_PYTHON)
    assert out.count("torch: ok") == nproc, out


@needs_torch
def test_torch_fsdp_example_2_processes():
    example = os.environ.get("DT_TORCH_FSDP", os.path.join(HERE, "..", "..", "examples", "python", "torch_fsdp.py"))
    out = launch(2, [example], python=TORCH_PYTHON, timeout=600)
    assert "OK: largest relative difference" in out, out
