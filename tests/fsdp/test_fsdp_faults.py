#!/usr/bin/env python3
"""A rank killed during an FSDP all-gather (fsdp_faults_main.cc under dtrun): every survivor must fail with an error
naming the dead rank, quickly (a hang is a failure, not a harness timeout).

usage: test_fsdp_faults.py DTRUN BINARY NPROC
"""
import os
import subprocess
import sys
import tempfile
import time


def main():
    dtrun, binary, nproc = sys.argv[1], sys.argv[2], int(sys.argv[3])
    victim = nproc - 1
    out = tempfile.mkdtemp(prefix="fsdp_faults_")
    env = dict(os.environ, DT_TEST_OUT=out, DT_UCX_STALL_MS="200", DT_TIMEOUT_S="30")
    args = [dtrun, "--nproc-per-node", str(nproc), "--tag-output", "--grace-period", "20", binary, str(victim)]
    t0 = time.monotonic()
    try:
        proc = subprocess.run(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=90)
    except subprocess.TimeoutExpired as e:
        print((e.stdout or b"").decode(errors="replace"))
        print("FAIL: the run hung (no exit within 90 s)")
        return 1
    elapsed = time.monotonic() - t0
    print(proc.stdout.decode(errors="replace"))
    print(f"dtrun exit code {proc.returncode} after {elapsed:.1f} s")
    failures = []
    if proc.returncode == 0:
        failures.append("dtrun must fail when a rank is killed")
    if elapsed > 40:
        failures.append(f"took {elapsed:.1f} s: survivors must notice the dead rank quickly")
    for r in range(nproc):
        if r == victim:
            continue
        path = os.path.join(out, f"rank{r}.txt")
        text = open(path).read() if os.path.exists(path) else ""
        print(f"--- rank {r} ---\n{text}")
        if "error" not in text:
            failures.append(f"rank {r} reported no error")
        if f"rank {victim}" not in text:
            failures.append(f"rank {r}'s error does not name rank {victim}")
        if "segments) on ucx" not in text:  # the failing call as issued: FSDP gathers segmented blocks on a host
            failures.append(f"rank {r}'s error does not describe the failing call as a segmented one")
        if "exit 0" not in text:
            failures.append(f"rank {r} did not finish its report")
    for f in failures:
        print("FAIL:", f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
