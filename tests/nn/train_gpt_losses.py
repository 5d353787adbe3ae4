#!/usr/bin/env python3
"""examples/train_gpt on one process and on real processes with tp = 2, tp = 4, dp x tp = 2 x 2, FSDP over 2 (its
shards mapped, then copied), HSDP 2 x 2 and FSDP 2 x TP 2 (dtrun, UCX): the losses of the first 20 steps must agree
with the one-process run within 1e-4 relative, and every run must print one JSON line per step with the fields the issues name. A run stopped after
step 10 with a checkpoint (FSDP 2, async save) and resumed on FSDP 2 x TP 2 continues with the same losses. The vocabulary (97)
splits unevenly over 2 and 4 ranks, for TP and for FSDP's dim-0 shards.

Usage: train_gpt_losses.py DTRUN TRAIN_GPT [--device cuda]

With --device cuda (suite gpu): one process on the GPU against one process on the CPU (1e-3: cuBLAS and OpenBLAS
sum in different orders), then tp = 2 with two processes sharing the GPU (UCX) against one GPU process (1e-4).
Exits 77 (skipped) only when the machine has no CUDA device (nvidia-smi lists none and there is no /dev/nvidia0);
with one, a run that fails is a failure. One-process GPU runs go through `dtrun --nproc-per-node 1`: a process started
without a launcher gets a thread world, which refuses CUDA meshes.
"""
import json
import os
import subprocess
import sys
import tempfile

STEPS = 20
COMMON = ["--steps", str(STEPS), "--json", "--layers", "2", "--dim", "64", "--heads", "4", "--vocab", "97",
          "--seq", "16", "--batch", "4", "--threads", "1"]


def run(cmd, first=1, last=STEPS, env=None):
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env={**os.environ, **(env or {})})
    if out.returncode != 0:
        sys.exit(f"{' '.join(cmd)} exited {out.returncode}:\n{out.stdout}\n{out.stderr}")
    rows = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{\"step")]
    for r in rows:
        missing = {"step", "loss", "tokens_per_s", "peak_bytes", "rss_peak_bytes"} - set(r)
        if missing:
            sys.exit(f"{' '.join(cmd)}: a JSON line lacks {sorted(missing)}: {r}")
    if [r["step"] for r in rows] != list(range(first, last + 1)):
        sys.exit(f"{' '.join(cmd)}: expected steps {first}..{last}, got {[r['step'] for r in rows]}")
    return [r["loss"] for r in rows]


def cuda_device_present():
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=60)
        if out.returncode == 0 and "GPU " in out.stdout:
            return True
    except (OSError, subprocess.TimeoutExpired):
        pass
    return os.path.exists("/dev/nvidia0")


def main_cuda(dtrun, train):
    if not cuda_device_present():
        print("no CUDA device (nvidia-smi lists none, no /dev/nvidia0): skipped")
        sys.exit(77)
    one_gpu = [dtrun, "--nproc-per-node", "1", "--timeout", "300", train, "--device", "cuda"]
    cpu = run([train] + COMMON)
    gpu = run(one_gpu + COMMON)
    for step, (a, b) in enumerate(zip(gpu, cpu), start=1):
        if abs(a - b) > 1e-3 * abs(b):
            sys.exit(f"cuda: step {step} loss {a} differs from the CPU's {b}")
    tp = run([dtrun, "--nproc-per-node", "2", "--timeout", "300", train, "--device", "cuda", "--tp", "2"] + COMMON)
    for step, (a, b) in enumerate(zip(tp, gpu), start=1):
        if abs(a - b) > 1e-4 * abs(b):
            sys.exit(f"cuda tp 2: step {step} loss {a} differs from one GPU process {b}")
    fsdp = run([dtrun, "--nproc-per-node", "2", "--timeout", "300", train, "--device", "cuda", "--dp", "2", "--fsdp"]
               + COMMON)
    for step, (a, b) in enumerate(zip(fsdp, gpu), start=1):
        if abs(a - b) > 1e-4 * abs(b):
            sys.exit(f"cuda fsdp 2: step {step} loss {a} differs from one GPU process {b}")
    offload = run([dtrun, "--nproc-per-node", "2", "--timeout", "300", train, "--device", "cuda", "--dp", "2", "--fsdp",
                   "--cpu-offload"] + COMMON)
    for step, (a, b) in enumerate(zip(offload, gpu), start=1):
        if abs(a - b) > 1e-4 * abs(b):
            sys.exit(f"cuda fsdp 2 with cpu offload: step {step} loss {a} differs from one GPU process {b}")
    # Checkpoints of GPU tensors (copied to the host to be written, loaded back into device memory): FSDP 2 on the
    # GPU stopped after step 10, resumed on one GPU process.
    with tempfile.TemporaryDirectory(prefix="train_gpt_ckpt_") as d:
        first = run([dtrun, "--nproc-per-node", "2", "--timeout", "300", train, "--device", "cuda", "--dp", "2",
                     "--fsdp", "--save-dir", d, "--save-every", "5", "--async-save", "--stop-at", "10"] + COMMON, 1, 10)
        second = run(one_gpu + ["--save-dir", d, "--resume"] + COMMON, 11, STEPS)
        for step, (a, b) in enumerate(zip(first + second, gpu), start=1):
            if abs(a - b) > 1e-4 * abs(b):
                sys.exit(f"cuda fsdp 2 stopped at 10, resumed on one GPU: step {step} loss {a} differs from {b}")
    print(f"cuda: {STEPS} losses match the CPU (1e-3); tp 2, fsdp 2, fsdp 2 with cpu offload and a checkpointed run "
          f"resumed on one GPU match one GPU process (1e-4)")


def main():
    dtrun, train = sys.argv[1], sys.argv[2]
    if sys.argv[3:] == ["--device", "cuda"]:
        return main_cuda(dtrun, train)
    ref = run([train] + COMMON)
    if not ref[-1] < ref[0]:
        sys.exit(f"one process: the loss did not go down in {STEPS} steps: {ref}")
    worst = 0.0
    for name, n, flags, *env in [("tp 2", 2, ["--tp", "2"]), ("tp 4", 4, ["--tp", "4"]),
                           ("dp 2 x tp 2", 4, ["--dp", "2", "--tp", "2"]),
                           ("tp 2 sequence parallel", 2, ["--tp", "2", "--sequence-parallel"]),
                           ("fsdp 2", 2, ["--dp", "2", "--fsdp"]),
                           # The copying gather where fsdp 2 maps the shards (Note [Gathering by mapping]).
                           ("fsdp 2, shards copied", 2, ["--dp", "2", "--fsdp"], {"DT_FSDP_MAP_SHARDS": "0"}),
                           ("hsdp 2 x 2", 4, ["--dp", "4", "--hsdp", "2"]),
                           ("fsdp 2 x tp 2", 4, ["--dp", "2", "--tp", "2", "--fsdp"])]:
        got = run([dtrun, "--nproc-per-node", str(n), "--timeout", "120", train] + flags + COMMON,
                  env=env[0] if env else None)
        for step, (a, b) in enumerate(zip(got, ref), start=1):
            rel = abs(a - b) / abs(b)
            worst = max(worst, rel)
            if rel > 1e-4:
                sys.exit(f"{name}: step {step} loss {a} differs from one process {b} (relative {rel:.2e})")
        print(f"{name}: {STEPS} losses agree with one process (largest relative difference so far {worst:.1e})")
    # Preempted after step 10 (FSDP 2, async checkpoints every 5 steps), resumed on another layout.
    with tempfile.TemporaryDirectory(prefix="train_gpt_ckpt_") as d:
        first = run([dtrun, "--nproc-per-node", "2", "--timeout", "120", train, "--dp", "2", "--fsdp", "--save-dir", d,
                     "--save-every", "5", "--async-save", "--stop-at", "10"] + COMMON, 1, 10)
        second = run([dtrun, "--nproc-per-node", "4", "--timeout", "120", train, "--dp", "2", "--tp", "2", "--fsdp",
                      "--save-dir", d, "--resume"] + COMMON, 11, STEPS)
        for step, (a, b) in enumerate(zip(first + second, ref), start=1):
            if abs(a - b) > 1e-4 * abs(b):
                sys.exit(f"fsdp 2 stopped at 10, resumed on fsdp 2 x tp 2: step {step} loss {a} differs from one "
                         f"process {b}")
        print("fsdp 2 stopped after step 10, resumed from its checkpoint on fsdp 2 x tp 2: 20 losses agree")
    print(f"one process: loss {ref[0]:.4f} -> {ref[-1]:.4f}")


if __name__ == "__main__":
    main()
