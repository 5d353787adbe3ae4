#!/usr/bin/env python3
"""dtensor.torch (bindings/python/dtensor/torch) against PyTorch itself (issue #38).

Each test launches `dtrun --nproc-per-node N python3 torch_cases.py CASE...`; in every process the same script
trains the same model with PyTorch FSDP2 (+ parallelize_module) on gloo and with dtensor.torch, and compares losses
and final parameters (torch_cases.py says how). The default run (meson, suite 'python') covers: the plain GPT and
transformers' Llama with FSDP on 2 processes, bf16 mixed precision, gradient accumulation without sync, microbatches
with set_is_last_backward, set_gradient_divide_factor, kept parameters after forward, activation checkpointing,
shared, frozen and tiny parameters, the collectives against gloo's, the errors; FSDP + TP (and sequence parallelism)
and a meta-device model with TP on 2 x 2; a checkpoint saved on 2 processes and loaded on 4 (FSDP + TP), the Hugging
Face export read back by transformers; one run under torchrun. --full adds FSDP on 4 processes for both models,
HSDP, bf16 Llama, and the rest of the cases on 4.

Run by meson: it re-executes itself under the build folder's py-venv (DT_PY_VENV) and runs pytest on itself; exit
77 (skipped, with the reason) when torch, transformers or pytest is missing. Environment (meson sets it): DTRUN,
DTENSOR_LIBRARY, DT_PY_SOURCE (bindings/python).
"""
import os
import socket
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
FULL = "--full" in sys.argv

if __name__ == "__main__":
    sys.path.insert(0, HERE)
    from py_venv import reexec_in_venv, skip_unless_importable
    reexec_in_venv()
    skip_unless_importable("pytest", "torch", "transformers")
    import pytest
    args = [a for a in sys.argv[1:] if a != "--full"]
    os.environ["DT_TEST_TORCH_FULL"] = "1" if FULL else ""
    sys.exit(pytest.main([os.path.abspath(__file__), "-v", "-rs", "-p", "no:cacheprovider", *args]))

import pytest  # noqa: E402

DTRUN = os.environ.get("DTRUN", "")
CASES = os.path.join(HERE, "torch_cases.py")
FULL = bool(os.environ.get("DT_TEST_TORCH_FULL"))


def free_ports(n):
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def environment(extra=None):
    if not DTRUN or not os.environ.get("DTENSOR_LIBRARY"):
        pytest.skip("DTRUN and DTENSOR_LIBRARY are not set (meson sets them)")
    env = dict(os.environ)
    src = os.environ.get("DT_PY_SOURCE", os.path.join(HERE, "..", "..", "bindings", "python"))
    env["PYTHONPATH"] = src + os.pathsep + env.get("PYTHONPATH", "")
    env.setdefault("OPENBLAS_NUM_THREADS", "1")
    env.setdefault("OMP_NUM_THREADS", "1")
    env["DT_TEST_TORCH_PORT"] = str(free_ports(1)[0])  # gloo's store for the PyTorch side
    env.update(extra or {})
    return env


def check(cmd, env, cases, nproc, timeout=600):
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    out = r.stdout + r.stderr
    assert r.returncode == 0, f"{' '.join(cmd)} exited with {r.returncode}:\n{out[-20000:]}"
    for case in cases:
        assert out.count(f"{case}: ok") == nproc, out[-20000:]
    print("\n".join(line for line in out.splitlines() if " steps, " in line or ": " in line and "ok" not in line
                    and line[:1].isalpha()))
    return out


def launch(nproc, cases, extra_env=None):
    cmd = [DTRUN, "--nproc-per-node", str(nproc), "--timeout", "120", sys.executable, CASES, *cases]
    return check(cmd, environment(extra_env), cases, nproc)


TWO = ["hook_path", "gpt", "llama", "bf16", "accumulate", "microbatches", "divide_factor", "reshard_options", "edge",
       "prefetch", "clip", "collectives", "errors", "meta_init"]


def test_fsdp_2_processes():
    launch(2, TWO)


def test_one_process():
    """Gathered memory that moves between forward and backward (moved_views): on 1 process, where gathers copy into
    the pool's memory; on one host's 2 processes page-sized weights are mappings of the peers' shards, which never
    move (Note [Gathering by mapping] in fsdp/mapped_path.cc)."""
    launch(1, ["hook_path", "moved_views"])


def test_fsdp_tp_2x2():
    full = ["gpt", "llama", "hsdp"] if FULL else []
    launch(4, ["gpt_tp", "gpt_tp_root", "llama_tp", "sequence_parallel", "clip", "meta_init", "meta_init_tp"] + full)


@pytest.mark.skipif(not FULL, reason="--full: the 2-process cases on 4 processes")
def test_fsdp_4_processes():
    launch(4, [c for c in TWO if c not in ("gpt", "llama", "clip")])


def test_checkpoint_2_to_4_processes_and_hf_export():
    with tempfile.TemporaryDirectory() as d:
        env = {"DT_TEST_CKPT": d}
        launch(2, ["ckpt_save", "hf_export"], env)
        launch(4, ["ckpt_load"], env)


def test_under_torchrun():
    """The same script under torchrun: dtensor's world from torchrun's environment, gloo from torchrun's store."""
    torch_port, dt_port = free_ports(2)
    env = environment({"DT_STORE_SECRET": "dtensor-torch-test-" + str(os.getpid()), "DT_MASTER_PORT": str(dt_port)})
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port", str(torch_port),
           CASES, "gpt", "collectives"]
    check(cmd, env, ["gpt", "collectives"], 2)
