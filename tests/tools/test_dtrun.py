#!/usr/bin/env python3
"""Tests of the dtrun launcher (and of bootstrap under mpirun), one case per invocation.

Usage: test_dtrun.py DTRUN HELPER CASE
Exit 0 on success, 1 on failure, 77 when the case cannot run here (meson: skipped).
"""
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

DTRUN, HELPER, CASE = sys.argv[1], sys.argv[2], sys.argv[3]

# Variables that would leak a launcher context into the test.
LEAKY = re.compile(r"^(DT_|OMPI_|PMIX_|SLURM_|TORCHELASTIC_|RANK$|WORLD_SIZE$|LOCAL_RANK$|LOCAL_WORLD_SIZE$|GROUP_RANK$|"
                   r"MASTER_ADDR$|MASTER_PORT$)")


def clean_env(**extra):
    env = {k: v for k, v in os.environ.items() if not LEAKY.match(k)}
    env.update(extra)
    return env


def run(args, timeout=60, env=None):
    start = time.monotonic()
    p = subprocess.run(args, capture_output=True, text=True, timeout=timeout, env=env or clean_env())
    return p, time.monotonic() - start


def check(cond, msg, p=None):
    if not cond:
        print("FAIL:", msg)
        if p is not None:
            print("--- exit code:", p.returncode)
            print("--- stdout:\n" + p.stdout)
            print("--- stderr:\n" + p.stderr)
        sys.exit(1)


def pid_alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie still answers kill(0); look at its state.
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ", 1)[1][0] != "Z"
    except FileNotFoundError:
        return False


def others_stopped(tmp, failing_rank, nranks):
    for r in range(nranks):
        if r == failing_rank:
            continue
        path = os.path.join(tmp, f"pid.{r}")
        if not os.path.exists(path):
            continue  # stopped before it even wrote its pid
        pid = int(open(path).read())
        if pid_alive(pid):
            return False
    return True


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def case_all_ok():
    p, _ = run([DTRUN, "--nproc-per-node", "3", HELPER, "ok"])
    check(p.returncode == 0, "all ranks exit 0 -> dtrun exits 0", p)


def case_fail_exit_code():
    with tempfile.TemporaryDirectory() as tmp:
        p, elapsed = run([DTRUN, "--nproc-per-node", "3", HELPER, "fail", "1", "3", tmp])
        check(p.returncode == 3, "a rank exiting 3 -> dtrun exits 3", p)
        check(elapsed < 20, f"dtrun stopped the others quickly (took {elapsed:.1f} s; they sleep 30 s)", p)
        check("rank 1 failed first" in p.stderr and "exited with code 3" in p.stderr, "summary names rank 1 and code 3", p)
        check(others_stopped(tmp, 1, 3), "the other ranks are gone", p)


def case_killed_by_signal():
    with tempfile.TemporaryDirectory() as tmp:
        p, elapsed = run([DTRUN, "--nproc-per-node", "3", HELPER, "kill", "2", str(int(signal.SIGKILL)), tmp])
        check(p.returncode == 128 + signal.SIGKILL, "a rank killed by SIGKILL -> 137", p)
        check(elapsed < 20, f"dtrun stopped the others quickly (took {elapsed:.1f} s)", p)
        check("rank 2 failed first" in p.stderr and "SIGKILL" in p.stderr, "summary names rank 2 and SIGKILL", p)
        check(others_stopped(tmp, 2, 3), "the other ranks are gone", p)


def case_tag_output():
    p, _ = run([DTRUN, "--nproc-per-node", "2", "--tag-output", HELPER, "lines", "3"])
    check(p.returncode == 0, "exit 0", p)
    out = sorted(p.stdout.splitlines())
    want_out = sorted([f"[r{r}] out {i}" for r in range(2) for i in range(3)] +
                      [f"[r{r}] no newline at the end" for r in range(2)])
    check(out == want_out, f"stdout lines are tagged and complete: {out}", p)
    err = sorted(line for line in p.stderr.splitlines() if not line.startswith("dtrun"))
    want_err = sorted(f"[r{r}] err {i}" for r in range(2) for i in range(3))
    check(err == want_err, f"stderr lines are tagged, complete, and kept apart from stdout: {err}", p)
    # Without the flag, output passes through untouched.
    p, _ = run([DTRUN, "--nproc-per-node", "1", HELPER, "lines", "2"])
    check(p.stdout == "out 0\nout 1\nno newline at the end", "untagged stdout passes through", p)


def case_env():
    env = clean_env(RANK="5", MASTER_PORT="1", TORCHELASTIC_RESTART_COUNT="7")  # must not reach the ranks
    p, _ = run([DTRUN, "--nproc-per-node", "2", "--timeout", "7", HELPER, "env"], env=env)
    check(p.returncode == 0, "exit 0", p)
    rows = {}
    for line in p.stdout.splitlines():
        kv = dict(item.split("=", 1) for item in line.split())
        rows[int(kv["DT_RANK"])] = kv
    check(sorted(rows) == [0, 1], f"one line per rank: {sorted(rows)}", p)
    secrets_seen = {kv["DT_STORE_SECRET"] for kv in rows.values()}
    ports = {kv["DT_MASTER_PORT"] for kv in rows.values()}
    for r, kv in rows.items():
        check(kv["DT_WORLD_SIZE"] == "2" and kv["DT_LOCAL_RANK"] == str(r) and kv["DT_LOCAL_WORLD_SIZE"] == "2",
              f"rank {r}: sizes and local rank {kv}", p)
        check(kv["DT_NODE_RANK"] == "0" and kv["DT_MASTER_ADDR"] == "127.0.0.1", f"rank {r}: node and address", p)
        check(kv["DT_STORE_HOSTED"] == "1" and kv["DT_TIMEOUT_S"] == "7", f"rank {r}: hosted flag and timeout", p)
        # torchrun's environment, replaced (not inherited): the same ranks; MASTER_PORT is free for torch's store.
        check(kv["RANK"] == str(r) and kv["WORLD_SIZE"] == "2" and kv["LOCAL_RANK"] == str(r) and
              kv["LOCAL_WORLD_SIZE"] == "2" and kv["GROUP_RANK"] == "0" and kv["MASTER_ADDR"] == "127.0.0.1",
              f"rank {r}: torchrun's variables {kv}", p)
        check(kv["MASTER_PORT"] not in ("1", kv["DT_MASTER_PORT"]) and 0 < int(kv["MASTER_PORT"]) < 65536,
              f"rank {r}: MASTER_PORT is a port of its own", p)
        check(kv["DT_RESTART_COUNT"] == "0" and kv["TORCHELASTIC_RESTART_COUNT"] == "0" and
              kv["TORCHELASTIC_MAX_RESTARTS"] == "0" and kv["DT_SLOT"] == str(r), f"rank {r}: generation 0", p)
        check(kv["TORCHELASTIC_ERROR_FILE"].endswith(f"/attempt_0/{r}/error.json"), f"rank {r}: its error file", p)
    check(len(secrets_seen) == 1 and re.fullmatch(r"[0-9a-f]{64}", secrets_seen.pop()), "one 64-hex secret", p)
    check(len(ports) == 1 and 0 < int(ports.pop()) < 65536, "one real port", p)
    # A secret from the environment is used as is.
    p, _ = run([DTRUN, "--nproc-per-node", "1", HELPER, "env"], env=clean_env(DT_STORE_SECRET="given-secret"))
    check("DT_STORE_SECRET=given-secret" in p.stdout, "DT_STORE_SECRET passes through", p)


def case_sigterm_forwarded():
    with tempfile.TemporaryDirectory() as tmp:
        proc = subprocess.Popen([DTRUN, "--nproc-per-node", "2", HELPER, "trap", tmp], env=clean_env(),
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 20
        while not all(os.path.exists(os.path.join(tmp, f"ready.{r}")) for r in range(2)):
            if time.monotonic() > deadline or proc.poll() is not None:
                proc.kill()
                out, err = proc.communicate()
                check(False, f"ranks did not start: rc={proc.returncode} {out} {err}")
            time.sleep(0.02)
        proc.send_signal(signal.SIGTERM)
        try:
            out, err = proc.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
            check(False, f"dtrun did not exit after SIGTERM: {err}")
        p = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
        check(proc.returncode == 128 + signal.SIGTERM, "dtrun exits 143 after SIGTERM", p)
        for r in range(2):
            check(os.path.exists(os.path.join(tmp, f"term.{r}")), f"rank {r} received the forwarded SIGTERM", p)
        check("SIGTERM" in err, "dtrun says it got SIGTERM", p)


def case_store_rendezvous():
    p, _ = run([DTRUN, "--nproc-per-node", "4", "--tag-output", HELPER, "store"])
    check(p.returncode == 0, "the ranks rendezvous through the store dtrun hosts", p)
    for r in range(4):
        want = f"[r{r}] store ok rank={r} world=4 local_rank={r} local_world=4 launcher=dtrun hosted=1"
        check(want in p.stdout.splitlines(), f"rank {r} line: {want}", p)


def case_grace_kill():
    # Ranks that ignore SIGTERM get SIGKILL after the grace period.
    with tempfile.TemporaryDirectory() as tmp:
        p, elapsed = run([DTRUN, "--nproc-per-node", "3", "--grace-period", "0.5", HELPER, "stubborn", "0", "4", tmp])
        check(p.returncode == 4, "the first failure's code (4)", p)
        check("sending SIGKILL" in p.stderr, "dtrun says it escalated to SIGKILL", p)
        check(elapsed < 20, f"dtrun did not wait for the stubborn ranks (took {elapsed:.1f} s)", p)
        check(others_stopped(tmp, 0, 3), "the stubborn ranks are gone", p)


def case_two_nodes():
    # Two dtrun instances on one machine acting as two nodes of one job: node 0 hosts the store.
    port = free_port()
    env = clean_env(DT_STORE_SECRET=secrets.token_hex(32))
    common = ["--nproc-per-node", "2", "--nnodes", "2", "--master-addr", "127.0.0.1", "--master-port", str(port),
              "--tag-output"]
    procs = [subprocess.Popen([DTRUN] + common + ["--node-rank", str(n), HELPER, "store"], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for n in (1, 0)]
    outs = []
    for proc in procs:
        try:
            out, err = proc.communicate(timeout=40)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
        outs.append(subprocess.CompletedProcess(proc.args, proc.returncode, out, err))
    for p in outs:
        check(p.returncode == 0, "both nodes succeed", p)
    lines = outs[0].stdout.splitlines() + outs[1].stdout.splitlines()
    for r in range(4):
        want = f"[r{r}] store ok rank={r} world=4 local_rank={r % 2} local_world=2 launcher=dtrun hosted=1"
        check(want in lines, f"rank {r} line: {want}", outs[0] if r >= 2 else outs[1])
    # Without a shared secret a multi-node dtrun refuses to start.
    p, _ = run([DTRUN] + common + ["--node-rank", "1", HELPER, "ok"])
    check(p.returncode == 2 and "DT_STORE_SECRET" in p.stderr, "multi-node needs DT_STORE_SECRET", p)


def generation_lines(p):
    """{(generation, rank): the rank's "gen=..." line as a dict} from the generations helper's output."""
    out = {}
    for line in p.stdout.splitlines():
        if line.startswith("gen="):
            kv = dict(item.split("=", 1) for item in line.split())
            out[(int(kv["gen"]), int(kv["rank"]))] = kv
    return out


def case_restarts():
    # Note [Elastic generations]: two failures, two restarts, then success; each generation numbered in both
    # conventions, in a key space of its own (the helper fails if it sees an older generation's key), and dtrun names
    # the failed rank's error file's message.
    base = [DTRUN, "--nproc-per-node", "2", "--failure-grace", "0", "--settle", "0.2"]
    p, _ = run(base + ["--max-restarts", "2", HELPER, "generations", "fail:1:3,fail:0:4,ok"])
    check(p.returncode == 0, "the third generation succeeds: exit 0", p)
    gens = generation_lines(p)
    check(sorted(gens) == [(g, r) for g in range(3) for r in range(2)], f"3 generations of 2 ranks: {sorted(gens)}", p)
    for (g, r), kv in gens.items():
        check(kv["torch_restart"] == str(g) and kv["torch_rank"] == str(r) and kv["world"] == "2",
              f"generation {g} rank {r}: {kv}", p)
    for g, r, code in ((0, 1, 3), (1, 0, 4)):
        check(f"rank {r}'s error file: rank {r} of generation {g} \"failed\"" in p.stderr,
              f"generation {g}: the error file's message", p)
        check(f"rank {r} failed first: exited with code {code}" in p.stderr, f"generation {g}: the failure", p)
    check("restart 2 of 2" in p.stderr, "restarts are counted", p)
    # No restarts left: the last failure's exit code.
    p, _ = run(base + ["--max-restarts", "1", HELPER, "generations", "fail:1:3,fail:1:5,ok"])
    check(p.returncode == 5 and "no restarts left (--max-restarts 1)" in p.stderr, "restarts run out", p)
    check(sorted(generation_lines(p)) == [(g, r) for g in range(2) for r in range(2)], "two generations ran", p)


def case_max_restarts_zero():
    # --max-restarts 0 (the default) keeps dtrun's behaviour: the same exit code and the same words.
    strip = lambda text: re.sub(r"pid \d+", "pid N", text)
    for extra in ([], ["--max-restarts", "0"]):
        p, _ = run([DTRUN, "--nproc-per-node", "2", "--failure-grace", "0"] + extra +
                   [HELPER, "generations", "fail:1:3,ok"])
        check(p.returncode == 3, f"{extra}: the failure's exit code", p)
        check(sorted(generation_lines(p)) == [(0, 0), (0, 1)], f"{extra}: one generation", p)
        if not extra:
            plain = strip(p.stderr)
        else:
            check(strip(p.stderr) == plain, f"the same messages:\n{plain}\nvs\n{strip(p.stderr)}", p)
    check("restart" not in plain, "no word of restarts", p)


def case_elastic_slots():
    # Note [Lost slots]: 4 slots in multiples of 2; rank 2 fails, its slot is lost, the job goes on with 2 ranks;
    # the slot is returned through --slot-file and the job restarts on 4 at once, without using a restart.
    with tempfile.TemporaryDirectory() as tmp:
        slot_file = os.path.join(tmp, "lost")
        cmd = [DTRUN, "--nproc-per-node", "2:4", "--world-multiple", "2", "--max-restarts", "1", "--slot-file",
               slot_file, "--failure-grace", "0", "--settle", "0.2", "--grace-period", "1", HELPER, "generations",
               "fail:2:3,wait,ok"]
        proc = subprocess.Popen(cmd, env=clean_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not (os.path.exists(slot_file) and open(slot_file).read().strip()):
            time.sleep(0.05)
        lost = open(slot_file).read().split() if os.path.exists(slot_file) else []
        time.sleep(0.5)
        with open(slot_file, "w"):
            pass  # every slot is back
        out, err = proc.communicate(timeout=40)
        p = subprocess.CompletedProcess(cmd, proc.returncode, out, err)
        check(lost == ["2"], f"the failed rank's slot is written as lost: {lost}", p)
        check(p.returncode == 0, "the job ends by itself: exit 0", p)
        gens = generation_lines(p)
        check(sorted(gens) == [(0, r) for r in range(4)] + [(1, 0), (1, 1)] + [(2, r) for r in range(4)],
              f"4, then 2, then 4 ranks: {sorted(gens)}", p)
        check([gens[(1, r)]["slot"] for r in range(2)] == ["0", "1"], "generation 1 runs on slots 0 and 1", p)
        check("slot(s) 2 lost (its rank failed first)" in p.stderr and "slot 2 is back" in p.stderr,
              "dtrun says which slot was lost and that it came back", p)
    # Too few slots left: 2:2 cannot lose one.
    p, _ = run([DTRUN, "--nproc-per-node", "1:2", "--world-multiple", "1", "--max-restarts", "3", "--failure-grace", "0",
                "--settle", "0", HELPER, "generations", "fail:0:3,fail:0:6,ok"])
    check(p.returncode == 1 and "fewer than the minimum 1" in p.stderr, "giving up when no slot is left", p)


def case_elastic_hang():
    # A hung rank (stopped, not dead): the other one ends on its timeout, the stopped one is stopped by dtrun, and
    # it is the hung rank's slot that is lost.
    p, _ = run([DTRUN, "--nproc-per-node", "1:2", "--max-restarts", "1", "--failure-grace", "1", "--settle", "0.2",
                "--grace-period", "1", HELPER, "generations", "hang:1,ok"])
    check(p.returncode == 0, "the job goes on without the hung rank", p)
    gens = generation_lines(p)
    check(sorted(gens) == [(0, 0), (0, 1), (1, 0)], f"2 ranks, then 1: {sorted(gens)}", p)
    check(gens[(1, 0)]["slot"] == "0" and "slot(s) 1 lost (their ranks hung)" in p.stderr, "slot 1 is lost", p)


def case_nodes_restart():
    # Note [Agent rendezvous]: two node agents on this machine; node 1's rank fails in generation 0, node 0's agent
    # stops its own rank on hearing it, and both meet again in generation 1, which succeeds.
    port = free_port()
    env = clean_env(DT_STORE_SECRET=secrets.token_hex(32))
    common = ["--nproc-per-node", "1", "--nnodes", "2", "--master-addr", "127.0.0.1", "--master-port", str(port),
              "--max-restarts", "2", "--failure-grace", "0", "--settle", "0.3", "--tag-output"]
    procs = [subprocess.Popen([DTRUN] + common + ["--node-rank", str(n), HELPER, "generations", "fail:1:3,ok"],
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for n in (1, 0)]
    outs = []
    for proc in procs:
        try:
            out, err = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
        outs.append(subprocess.CompletedProcess(proc.args, proc.returncode, out, err))
    node1, node0 = outs
    for p in outs:
        check(p.returncode == 0, "both agents end with the job: exit 0", p)
    lines = node0.stdout + node1.stdout
    for g in (0, 1):
        for r in (0, 1):
            check(f"[r{r}] gen={g} rank={r} world=2" in lines, f"generation {g} rank {r} ran", node0)
    check("stopping rank(s) 0: another node's ranks failed" in node0.stderr, "node 0 stops its rank", node0)
    check("restarting the job (restart 1 of 2)" in node0.stderr, "node 0 counts the restart", node0)
    check("rank 1's error file: rank 1 of generation 0" in node1.stderr, "node 1 names its rank's error", node1)


def case_usage_errors():
    for args in ([], ["--nproc-per-node", "2"], ["--nproc-per-node", "x", HELPER], ["--bogus", HELPER],
                 ["--nproc-per-node", "0", HELPER], ["--nproc-per-node", "2", "--nnodes", "2", "--node-rank", "2",
                                                     "--master-addr", "a", HELPER],
                 ["--nproc-per-node", "2", "--nnodes", "2", HELPER], ["--nproc-per-node", "1", "--timeout", "-3", HELPER],
                 ["--nproc-per-node"], ["--nproc-per-node", "3:2", HELPER], ["--nproc-per-node", "2:4", HELPER],
                 ["--nproc-per-node", "3:4", "--max-restarts", "1", "--world-multiple", "2", HELPER],
                 ["--nproc-per-node", "2", "--slot-file", "x", HELPER],
                 ["--nproc-per-node", "2", "--nnodes", "1:2", "--master-addr", "a", HELPER],
                 ["--nproc-per-node", "1:2", "--nnodes", "2", "--master-addr", "a", "--max-restarts", "1", HELPER]):
        p, _ = run([DTRUN] + args + (["ok"] if args and args[-1] == HELPER else []))
        check(p.returncode == 2, f"usage error exits 2: {args}", p)
        check(p.stderr.startswith("dtrun: ") and "dtrun --help" in p.stderr, f"usage error explains itself: {args}", p)
    # The program's own arguments pass through untouched, options among them; "--" ends dtrun's options.
    for args in (["--nproc-per-node", "1", HELPER, "ok", "--help", "--bogus=1"],
                 ["--nproc-per-node=1", "--", HELPER, "ok", "-h", "--"]):
        p, _ = run([DTRUN] + args)
        check(p.returncode == 0 and not p.stdout and not p.stderr, f"passed through: {args}", p)
    p, _ = run([DTRUN, "--nproc-per-node", "1", "/nonexistent/program"])
    check(p.returncode == 127 and "nonexistent" in p.stderr, "a missing program exits 127", p)
    p, _ = run([DTRUN, "--help"])
    check(p.returncode == 0 and "--nproc-per-node" in p.stdout and "--help-env" in p.stdout, "--help", p)
    # --help-env lists every variable core/config.h declares, each with its help line.
    p, _ = run([DTRUN, "--help-env"])
    header = open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "core", "config.h")).read()
    declared = re.findall(r'X\(k\w+, "(DT_[A-Z0-9_]+)"', header)
    check(p.returncode == 0 and len(declared) > 10, "--help-env", p)
    for name in declared:
        check(re.search(r"^  " + name + r" \(", p.stdout, re.M) is not None, f"--help-env lists {name}", p)


def case_mpirun():
    mpirun = shutil.which("mpirun")
    if mpirun is None:
        print("SKIP: mpirun not found")
        sys.exit(77)
    port = free_port()
    secret = secrets.token_hex(32)
    base = [mpirun, "--allow-run-as-root", "--oversubscribe", "-np", "2"]
    p, _ = run(base + ["-x", "DT_MASTER_ADDR=127.0.0.1", "-x", f"DT_MASTER_PORT={port}", "-x",
                       f"DT_STORE_SECRET={secret}", HELPER, "store"], timeout=90)
    check(p.returncode == 0, "two mpirun ranks rendezvous through rank 0's store", p)
    for r in range(2):
        want = f"store ok rank={r} world=2 local_rank={r} local_world=2 launcher=openmpi hosted=0"
        check(want in p.stdout.splitlines(), f"rank {r} line: {want}", p)
    # Without a secret the ranks refuse to start, naming the variable.
    p, _ = run(base + ["-x", f"DT_MASTER_PORT={free_port()}", HELPER, "store"], timeout=90)
    check(p.returncode != 0 and "DT_STORE_SECRET" in p.stderr, "no secret under mpirun is a clear error", p)


CASES = {name[5:]: fn for name, fn in globals().items() if name.startswith("case_")}

if __name__ == "__main__":
    if CASE not in CASES:
        print(f"unknown case {CASE}; known: {', '.join(sorted(CASES))}")
        sys.exit(2)
    CASES[CASE]()
    print(f"ok: {CASE}")
