#!/usr/bin/env python3
"""Two hosts on one machine (issue #19): two network namespaces joined by a veth pair, one dtrun per "host".

Each host is a network namespace with its own UTS namespace (its own host name, so dtensor sees another machine:
no /proc liveness checks, no direct copies across) and its own IPC namespace (so UCX cannot reach the other host's
shared memory: between hosts it takes TCP over the veth, within a host shared memory). The store runs on host A;
host B reaches it through the veth. Checks:

  1. train_gpt with FSDP x TP on a 2 x 2 mesh, 2 ranks per host (dp crosses the link, tp stays in a host), gives
     bit for bit the losses of the same command with 4 ranks on one host;
  2. the veth carried at least the bytes that rank 0's FSDP collectives had to send across (its all-gathers send
     their whole input to the peer, its reduce-scatters half of it: so at least half of what it fed them), and the
     one-host run put (next to) nothing on it;
  3. cutting the link (ip link set down) while the cross-host run trains makes every rank on both hosts exit with an
     error within DT_TIMEOUT_S + 10 s, both dtruns exit non-zero, and no process is left in either namespace.

Everything this script makes (namespaces, veth, processes) is removed on the way out, also on failure and on
SIGINT/SIGTERM; namespaces left by an earlier run that was killed outright (SIGKILL) are removed at start.
Exits 77 (skipped), saying why, where namespaces or a veth pair cannot be made (not root, no `ip`, EPERM).

Usage: two_hosts.py DTRUN TRAIN_GPT
"""
import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import threading
import time

PREFIX = "dt2h-"  # namespaces: dt2h-<pid>-a, dt2h-<pid>-b
DEV = "dtv0"  # the veth end in each namespace
TIMEOUT_S = 10  # DT_TIMEOUT_S of the link-cut run
TRAIN = ["--dp", "2", "--tp", "2", "--fsdp", "--threads", "1", "--layers", "2", "--dim", "96", "--heads", "4",
         "--vocab", "257", "--seq", "32", "--batch", "6"]  # 257: uneven over tp 2 and over FSDP's dim-0 shards
STEPS = 6


def skip(why):
    print(f"two_hosts: skipped: {why}")
    sys.exit(77)


def ip(*args, check=True):
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check, timeout=30)


def netns_pids(ns):
    r = ip("netns", "pids", ns, check=False)
    return [int(p) for p in r.stdout.split()] if r.returncode == 0 else []


def kill_netns(ns):
    for pid in netns_pids(ns):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    for _ in range(50):
        if not netns_pids(ns):
            break
        time.sleep(0.1)
    ip("netns", "del", ns, check=False)


def clean_stale():
    """Removes namespaces of earlier runs whose script is gone (a run killed with SIGKILL cannot clean up)."""
    for line in ip("netns", "list", check=False).stdout.splitlines():
        name = line.split()[0] if line.split() else ""
        m = re.fullmatch(PREFIX + r"(\d+)-[ab]", name)
        if not m:
            continue
        try:
            with open(f"/proc/{m.group(1)}/cmdline", "rb") as f:
                alive = b"two_hosts" in f.read()
        except OSError:
            alive = False
        if not alive:
            print(f"two_hosts: removing {name}, left by an earlier run (pid {m.group(1)} is gone)")
            kill_netns(name)


def alive(pid):
    """Whether the process exists and is not a zombie (one reparented to a container's init may stay unreaped)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def veth_bytes(ns):
    stats = json.loads(ip("-n", ns, "-j", "-s", "link", "show", "dev", DEV).stdout)[0]["stats64"]
    return stats["tx"]["bytes"], stats["rx"]["bytes"]


class Hosts:
    """Host A (10.213.x.1, the store) and host B (10.213.x.2), joined by a veth pair; removed by close()."""

    def __init__(self):
        self.ns = {"A": f"{PREFIX}{os.getpid()}-a", "B": f"{PREFIX}{os.getpid()}-b"}
        subnet = 10 + os.getpid() % 240
        self.addr = {"A": f"10.213.{subnet}.1", "B": f"10.213.{subnet}.2"}
        self.made = []
        self.procs = []

    def setup(self):
        for h in "AB":
            r = ip("netns", "add", self.ns[h], check=False)
            if r.returncode != 0:
                skip(f"cannot create a network namespace ({r.stderr.strip()})")
            self.made.append(self.ns[h])
        # Both ends are born inside their namespaces: nothing appears in the machine's own namespace.
        r = ip("link", "add", DEV, "netns", self.ns["A"], "type", "veth", "peer", "name", DEV, "netns",
               self.ns["B"], check=False)
        if r.returncode != 0:
            skip(f"cannot create a veth pair ({r.stderr.strip()})")
        for h in "AB":
            ip("-n", self.ns[h], "addr", "add", self.addr[h] + "/24", "dev", DEV)
            ip("-n", self.ns[h], "link", "set", "lo", "up")
            ip("-n", self.ns[h], "link", "set", DEV, "up")
        # UCX lists only interfaces that are up: wait for the carrier on both ends.
        deadline = time.monotonic() + 10
        while not all("LOWER_UP" in ip("-n", self.ns[h], "link", "show", DEV).stdout for h in "AB"):
            if time.monotonic() > deadline:
                raise RuntimeError("the veth pair did not come up within 10 s")
            time.sleep(0.05)

    def start(self, host, dtrun_args, env):
        """dtrun on `host`, in its namespaces, with its own host name; stdout and stderr merged, lines tagged."""
        cmd = ["ip", "netns", "exec", self.ns[host], "unshare", "--uts", "--ipc", "sh", "-c",
               'hostname "$1" && shift && exec "$@"', "sh", "host" + host, *dtrun_args]
        p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                             start_new_session=True)
        self.procs.append(p)
        return p

    def close(self):
        for p in self.procs:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                p.wait()
        for ns in self.made:
            kill_netns(ns)
        self.made = []


class Reader(threading.Thread):
    """Collects a process's output lines with the time each arrived."""

    def __init__(self, proc):
        super().__init__(daemon=True)
        self.proc = proc
        self.lines = []  # (monotonic time, line)
        self.start()

    def run(self):
        for line in self.proc.stdout:
            self.lines.append((time.monotonic(), line.rstrip("\n")))

    def text(self):
        return "\n".join(line for _, line in self.lines)


def node_args(dtrun, train, hosts, nnodes, node_rank, nproc, timeout_s, extra):
    return [dtrun, "--nnodes", str(nnodes), "--node-rank", str(node_rank), "--master-addr", hosts.addr["A"],
            "--master-port", "29500", "--nproc-per-node", str(nproc), "--tag-output", "--timeout", str(timeout_s),
            "--grace-period", "2", train, *extra]


def finish(procs, limit_s):
    """Waits for every (process, reader); returns their exit codes and exit times (None: still running after
    limit_s)."""
    deadline = time.monotonic() + limit_s
    codes, ended = [None] * len(procs), [None] * len(procs)
    while time.monotonic() < deadline and None in codes:
        for i, (p, _) in enumerate(procs):
            if codes[i] is None and p.poll() is not None:
                codes[i], ended[i] = p.returncode, time.monotonic()
        time.sleep(0.02)
    for _, reader in procs:
        reader.join(timeout=5)
    return codes, ended


def losses(text, what):
    rows = [json.loads(m.group(1)) for m in re.finditer(r"^\[r0\] (\{\"step.*)$", text, re.M)]
    if [r["step"] for r in rows] != list(range(1, STEPS + 1)):
        sys.exit(f"{what}: expected steps 1..{STEPS} from rank 0, got:\n{text}")
    comm = [json.loads(m.group(1))["comm"] for m in re.finditer(r"^\[r0\] (\{\"comm.*)$", text, re.M)]
    return [r["loss"] for r in rows], [r["step_s"] for r in rows], (comm[0] if comm else None)


def train_across(hosts, dtrun, train, env):
    extra = TRAIN + ["--steps", str(STEPS), "--json"]
    before = veth_bytes(hosts.ns["A"])
    t0 = time.monotonic()
    a = hosts.start("A", node_args(dtrun, train, hosts, 2, 0, 2, 120, extra), env)
    b = hosts.start("B", node_args(dtrun, train, hosts, 2, 1, 2, 120, extra), env)
    ra, rb = Reader(a), Reader(b)
    codes, _ = finish([(a, ra), (b, rb)], 180)
    wall = time.monotonic() - t0
    after = veth_bytes(hosts.ns["A"])
    if codes != [0, 0]:
        sys.exit(f"cross-host training: dtrun exit codes {codes} (None: still running after 180 s)\n"
                 f"--- host A:\n{ra.text()}\n--- host B:\n{rb.text()}")
    loss, step_s, comm = losses(ra.text(), "cross-host training")
    return loss, step_s, comm, wall, (after[0] - before[0], after[1] - before[1])


def train_one_host(hosts, dtrun, train, env):
    extra = TRAIN + ["--steps", str(STEPS), "--json"]
    before = veth_bytes(hosts.ns["A"])
    t0 = time.monotonic()
    a = hosts.start("A", node_args(dtrun, train, hosts, 1, 0, 4, 120, extra), env)
    ra = Reader(a)
    codes, _ = finish([(a, ra)], 180)
    wall = time.monotonic() - t0
    after = veth_bytes(hosts.ns["A"])
    if codes != [0]:
        sys.exit(f"one-host training: dtrun exit code {codes[0]}\n{ra.text()}")
    loss, step_s, _ = losses(ra.text(), "one-host training")
    return loss, step_s, wall, (after[0] - before[0], after[1] - before[1])


def cut_link(hosts, dtrun, train, env):
    extra = TRAIN + ["--steps", "1000000", "--json"]  # JSON: rank 0's only "train_gpt: " line is its error
    a = hosts.start("A", node_args(dtrun, train, hosts, 2, 0, 2, TIMEOUT_S, extra), env)
    b = hosts.start("B", node_args(dtrun, train, hosts, 2, 1, 2, TIMEOUT_S, extra), env)
    ra, rb = Reader(a), Reader(b)
    deadline = time.monotonic() + 120
    while not any(line.startswith('[r0] {"step":3,') for _, line in ra.lines):
        if time.monotonic() > deadline or a.poll() is not None or b.poll() is not None:
            sys.exit(f"link cut: the run did not reach step 3\n--- host A:\n{ra.text()}\n--- host B:\n{rb.text()}")
        time.sleep(0.05)
    # The ranks: every process in the namespaces but dtrun itself.
    ranks = {h: sorted(set(netns_pids(hosts.ns[h])) - {p.pid}) for h, p in (("A", a), ("B", b))}
    t_cut = time.monotonic()
    ip("-n", hosts.ns["B"], "link", "set", DEV, "down")
    limit = TIMEOUT_S + 10
    codes, ended = finish([(a, ra), (b, rb)], limit)
    report = []
    failed = False
    for (h, reader), code, end in zip((("A", ra), ("B", rb)), codes, ended):
        if code is None:
            failed = True
            report.append(f"host {h}: dtrun still running {limit} s after the cut (a hang)")
            continue
        report.append(f"host {h}: dtrun exited {code} {end - t_cut:.1f} s after the cut (ranks were pids "
                      f"{ranks[h]})")
        if not 1 <= code <= 127:  # 0: the cut went unnoticed; above 127: a rank was killed by a signal (a crash)
            failed = True
            report.append(f"host {h}: FAILED: dtrun should exit with a rank's error code, not {code}")
        crashes = [line for _, line in reader.lines if "Assertion" in line or "backtrace" in line]
        if crashes:
            failed = True
            report.append(f"host {h}: FAILED: a rank crashed: {crashes[0]}")
        left = [pid for pid in set(netns_pids(hosts.ns[h])) | set(ranks[h]) if alive(pid)]
        if left:
            failed = True
            report.append(f"host {h}: FAILED: processes left behind: {sorted(left)}")
        stopped = "".join(line for _, line in reader.lines if re.match(r"dtrun: rank \d+ failed first", line))
        for r in ([0, 1] if h == "A" else [2, 3]):
            errors = [(t, line) for t, line in reader.lines if line.startswith(f"[r{r}] train_gpt: ")]
            if errors:
                t, line = errors[0]
                report.append(f"  rank {r}: error {t - t_cut:.1f} s after the cut: {line}")
                # The error names the call and the peer it awaited (peer_name: "rank N (... pid P on host)").
                if not re.search(r"[a-z_]+\(.*\) on ucx\[.*pid \d+ on host[AB]", line):
                    failed = True
                    report.append(f"  rank {r}: FAILED: the error does not name the call and the peer")
            elif re.search(rf"stopped rank\(s\): .*\b{r}\b", stopped):
                report.append(f"  rank {r}: stopped by dtrun after a rank of its host failed: {stopped}")
            else:
                failed = True
                report.append(f"  rank {r}: FAILED: no error line and not stopped by dtrun")
    print(f"link cut while training (DT_TIMEOUT_S={TIMEOUT_S}), output after the cut:")
    for h, reader in (("A", ra), ("B", rb)):
        for t, line in reader.lines:
            if t >= t_cut:
                print(f"  host {h} +{t - t_cut:5.1f} s: {line}")
    print("\n".join(report))
    if failed:
        sys.exit(f"link cut: not every rank failed cleanly\n--- host A:\n{ra.text()}\n--- host B:\n{rb.text()}")


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    dtrun, train = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    if os.geteuid() != 0:
        skip("network namespaces need root (CAP_NET_ADMIN and CAP_SYS_ADMIN)")
    for tool in ("ip", "unshare", "hostname"):
        if shutil.which(tool) is None:
            skip(f"`{tool}` is not installed")
    # Ctrl-C (even where a shell started this with SIGINT ignored), SIGTERM (meson's timeout) and SIGHUP unwind, so
    # that the finally below removes everything.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, lambda s, f: sys.exit(128 + s))
    clean_stale()
    hosts = Hosts()
    try:
        hosts.setup()
        env = dict(os.environ)
        env.update({
            "DT_STORE_SECRET": secrets.token_hex(32),
            # Only the veth: both hosts share a boot id, so UCX would take the other host's loopback for its own.
            "UCX_NET_DEVICES": DEV,
        })
        for k in ("DT_TIMEOUT_S", "UCX_TLS"):
            env.pop(k, None)
        across, steps_across, comm, wall_across, (tx, rx) = train_across(hosts, dtrun, train, env)
        one, steps_one, wall_one, (tx1, rx1) = train_one_host(hosts, dtrun, train, env)
        print(f"training, {STEPS} steps of FSDP 2 x TP 2: across two hosts {wall_across:.2f} s, on one host "
              f"{wall_one:.2f} s (whole dtrun runs); steps 2..{STEPS}: {sum(steps_across[1:]):.3f} s across, "
              f"{sum(steps_one[1:]):.3f} s on one host")
        for step, (x, y) in enumerate(zip(across, one), start=1):
            print(f"  step {step}: loss {x!r} across hosts, {y!r} on one host")
        if across != one:
            sys.exit("the losses across two hosts differ from those on one host")
        need = comm["bytes"] // 2 if comm else 0
        print(f"veth of host A during the cross-host run: tx {tx} B, rx {rx} B; rank 0's FSDP collectives alone "
              f"had to send at least {need} B across (half of the {comm['bytes'] if comm else 0} B they were fed); "
              f"during the one-host run: tx {tx1} B, rx {rx1} B")
        if comm is None or need <= 0 or tx < need or rx < need:
            sys.exit("the veth did not carry the cross-host traffic: UCX did not go over TCP between the hosts")
        cut_link(hosts, dtrun, train, env)
        print("two_hosts: ok")
    finally:
        hosts.close()


if __name__ == "__main__":
    main()
