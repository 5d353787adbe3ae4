#!/usr/bin/env python3
"""Fault scenarios of the UCX communicator on real processes (ucx_faults_test.cc), run through dtrun.

usage: test_ucx_faults.py DTRUN BINARY SCENARIO NPROC [ARG]

Each rank writes what it saw to $DT_TEST_OUT/rank<R>.txt; this script checks the files, dtrun's exit code and the
time it took (a hang is a failure, not a timeout of the test harness).
"""
import os
import subprocess
import sys
import tempfile
import time


def main():
    dtrun, binary, scenario, nproc = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    out = tempfile.mkdtemp(prefix="ucx_faults_")
    env = dict(os.environ, DT_TEST_OUT=out, DT_UCX_STALL_MS="200", DT_TIMEOUT_S="30")
    args = [dtrun, "--nproc-per-node", str(nproc), "--tag-output", "--grace-period", "20", binary, scenario]
    victim = None
    if scenario == "kill":
        victim = nproc - 2 if nproc > 2 else 1
        args.append(str(victim))
    if scenario == "mismatch_call":
        args.append(sys.argv[5])
    if scenario == "mismatch_kind":
        env["DT_TIMEOUT_S"] = "2"
    if scenario == "debug_mismatch":
        env["DT_DEBUG_COLLECTIVES"] = "1"
    t0 = time.monotonic()
    try:
        proc = subprocess.run(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=60)
    except subprocess.TimeoutExpired as e:
        print((e.stdout or b"").decode(errors="replace"))
        print(f"FAIL: {scenario} hung (no exit within 60 s)")
        return 1
    elapsed = time.monotonic() - t0
    output = proc.stdout.decode(errors="replace")
    print(output)
    print(f"dtrun exit code {proc.returncode} after {elapsed:.1f} s")

    files = {}
    for r in range(nproc):
        path = os.path.join(out, f"rank{r}.txt")
        files[r] = open(path).read() if os.path.exists(path) else ""
        print(f"--- rank {r} ---\n{files[r]}")

    failures = []

    def check(cond, msg):
        if not cond:
            failures.append(msg)

    if scenario == "kill":
        check(proc.returncode != 0, "dtrun must fail when a rank is killed")
        check(elapsed < 30, f"took {elapsed:.1f} s: survivors must notice the dead rank quickly")
        for r in range(nproc):
            if r == victim:
                continue
            text = files[r]
            check("error" in text, f"rank {r} reported no error")
            check(f"rank {victim}" in text, f"rank {r}'s error does not name rank {victim}")
            check(any(w in text for w in ("gone", "killed", "died")), f"rank {r}'s error does not say the peer died")
            check("exit 0" in text, f"rank {r} did not finish its report")
    elif scenario in ("mismatch_count", "debug_mismatch"):
        check(proc.returncode == 0, "every rank must report the mismatch and exit 0")
        check(elapsed < 25, f"took {elapsed:.1f} s: a mismatch must be reported, not waited out")
        for r in range(nproc):
            text = files[r]
            check("error" in text, f"rank {r} reported no error")
            check("mismatched" in text, f"rank {r}'s error does not say the calls mismatched")
            if scenario == "debug_mismatch":
                check("InvalidArgument" in text or "invalid argument" in text, f"rank {r}: expected InvalidArgument")
                check("rank 0" in text, f"rank {r}'s error does not name rank 0")
            if scenario == "mismatch_count":
                check("later call:" in text, f"rank {r}: a call after the failure must fail at once")
    elif scenario in ("mismatch_call", "mismatch_kind"):
        # mismatch_call: found when the call stalls (deadline 30 s); mismatch_kind: the same, or its 2 s deadline.
        check(proc.returncode == 0, "every rank must report the mismatch and exit 0")
        check(elapsed < 20, f"took {elapsed:.1f} s: a mismatch must be reported, not waited out")
        for r in range(nproc):
            text = files[r]
            if scenario == "mismatch_call":
                says = "mismatched"
            else:
                says = "all_gather" if r == 0 else "reduce_scatter"
            check("error" in text, f"rank {r} reported no error")
            check(says in text or "reported" in text, f"rank {r}'s error says neither '{says}' nor who reported it")
            check("rank " in text, f"rank {r}'s error names no peer")
    elif scenario == "p2p_busy_peer":
        check(proc.returncode == 0, "a slow but correct peer is not a fault")
        for r in range(nproc):
            check("ok" in files[r] and "error" not in files[r], f"rank {r} did not succeed")
    elif scenario == "wait_timeout":
        check(proc.returncode == 0, "the late rank must not break the group")
        for r in range(nproc):
            text = files[r]
            check("ok" in text, f"rank {r} did not finish")
            if r != 0:
                check("timeout:" in text and "still waiting for" in text and "from rank" in text,
                      f"rank {r}'s timeout does not name the peer it waits for")
    else:
        failures.append(f"unknown scenario {scenario}")

    for f in failures:
        print("FAIL:", f)
    if not failures:
        print(f"PASS: {scenario} on {nproc} ranks")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
