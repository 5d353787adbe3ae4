#!/usr/bin/env python3
"""The store, attacked (issue #19): a real job keeps running and finishes with the same result while its store is
attacked from several threads.

Runs `dtrun --nproc-per-node 2 TRAIN_GPT --dp 2 --json` twice: once quietly (the reference losses), once while
threads attack the store dtrun hosts (on a --master-port picked here, with a DT_STORE_SECRET set here, so that the
script can also act as a well-behaved client and record a genuine handshake to replay):

  port_scan      connect and close at once
  random_bytes   random bytes (68..4096: at least a handshake's worth) instead of a handshake
  huge_length    a handshake of the right size with a garbage MAC followed by a 0xffffffff length field, and (with
                 the secret) a correct handshake followed by a 0xffffffff / 64 MiB + 1 frame length
  wrong_secret   a well-formed DTC1 answer whose MAC uses another secret
  replay         the 68 bytes of a recorded genuine handshake, replayed on new connections
  slow_client    the handshake one byte per second, holding the connection (closed by the auth deadline, 10 s)
  flood          hundreds of simultaneous connections (more than the 256 the server admits while authenticating),
                 held for a moment, then dropped
  legit          the well-behaved client: a set/get round trip on a fresh authenticated connection every 0.25 s
                 (retrying, as TcpStore does, while the flood holds every authentication slot)

For each kind: attempts and how the server answered (closed the connection, refused it at accept = closed before
sending its hello, timed out = still open at the deadline, or connect refused). dtrun's VmRSS (the server lives in
dtrun) is sampled before and during the attack: the server allocates nothing large before authentication, so its
growth stays small. Checks: the attacked job exits 0 with bit-for-bit the same losses as the quiet run; every
unauthenticated attack was closed or refused, never answered with DTOK; every legit round trip succeeded; dtrun grew
by less than RSS_LIMIT_MB.

The attack lasts as long as the job (at most 12 s, --long 120 s); attempts that find dtrun gone after the job ended
are counted apart (after_job_end).

Usage: store_attack.py DTRUN TRAIN_GPT [--long]
  default: bounded (500 steps of a small model, 10-30 s in all on a busy 2-core machine), as the meson test
           store_attack runs it
  --long:  3000 steps and up to 120 s of attack (400 connections per flood), for a manual stress run
Python 3 standard library only.
"""
import hashlib
import hmac
import json
import os
import random
import secrets
import socket
import struct
import subprocess
import sys
import threading
import time
from collections import Counter, defaultdict

HOST = "127.0.0.1"
NONCE = 32
MAC = 32
RSS_LIMIT_MB = 32  # growth of dtrun's RSS allowed during the attack (its buffers for hundreds of connections)
TRAIN = ["--dp", "2", "--threads", "1", "--layers", "1", "--dim", "64", "--heads", "4", "--vocab", "257", "--seq",
         "32", "--batch", "4", "--json"]


def free_port():
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def mac(secret, label, sn, cn):
    return hmac.new(secret.encode(), label + sn + cn, hashlib.sha256).digest()


def recv_exact(s, n):
    out = b""
    while len(out) < n:
        b = s.recv(n - len(out))
        if not b:
            return None
        out += b
    return out


def outcome(s, timeout):
    """How the server ends a connection we are done talking on: 'closed' (EOF or reset) or 'timed_out'."""
    s.settimeout(timeout)
    try:
        while True:
            b = s.recv(4096)
            if not b:
                return "closed"
            if b.startswith(b"DTOK"):
                return "accepted"  # an attack must never get this
    except socket.timeout:
        return "timed_out"
    except OSError:
        return "closed"


def connect(port, timeout=5.0):
    s = socket.create_connection((HOST, port), timeout=timeout)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def read_hello(s):
    """The server's nonce, or None when it closed before sending a hello (refused at accept)."""
    try:
        h = recv_exact(s, 4 + NONCE)
    except OSError:
        return None
    return h[4:] if h and h.startswith(b"DTS1") else None


def authenticate(s, secret):
    """The client half of the handshake (Note [store authentication]); returns the 68 bytes sent, or None."""
    sn = read_hello(s)
    if sn is None:
        return None
    cn = secrets.token_bytes(NONCE)
    msg = b"DTC1" + cn + mac(secret, b"dtstore-v1 client", sn, cn)
    s.sendall(msg)
    ok = recv_exact(s, 4 + MAC)
    if not ok or ok[:4] != b"DTOK" or not hmac.compare_digest(ok[4:], mac(secret, b"dtstore-v1 server", sn, cn)):
        return None
    return msg


def frame(body):
    return struct.pack("<I", len(body)) + body


def sstr(b):
    return struct.pack("<I", len(b)) + b


class Attack:
    def __init__(self, port, secret, stop, job):
        self.port, self.secret, self.stop, self.job = port, secret, stop, job
        self.counts = defaultdict(Counter)
        self.errors = []
        self.lock = threading.Lock()
        self.replay_msg = None

    def count(self, kind, result):
        with self.lock:
            self.counts[kind]["attempts" if result is None else result] += 1

    def ended(self):
        """Whether the job has ended (or is ending: dtrun closes the store just before it exits)."""
        try:
            self.job.wait(timeout=2.0)
            return True
        except subprocess.TimeoutExpired:
            return False

    def attempt(self, kind, fn):
        self.count(kind, None)
        try:
            result = fn()
        except ConnectionRefusedError:
            result = "connect_refused"
        except (ConnectionResetError, BrokenPipeError):
            result = "closed"
        except socket.timeout:
            result = "timed_out"
        # Once the job has ended, dtrun and its store are gone: what happened then is not the server's doing.
        if result in ("connect_refused", "closed", "refused", "failed") and self.job.poll() is not None:
            result = "after_job_end"
        elif result in ("connect_refused", "failed") and self.ended():
            result = "after_job_end"
        self.count(kind, result)

    def loop(self, kind, fn, pause):
        try:
            while not self.stop.is_set():
                self.attempt(kind, fn)
                self.stop.wait(pause)
        except Exception as e:  # a dying attack thread is a failure of this script, reported as such
            self.errors.append(f"{kind}: {type(e).__name__}: {e}")

    # --- the attacks ---
    def port_scan(self):
        connect(self.port).close()
        return "closed_by_us"

    def random_bytes(self):
        with connect(self.port) as s:
            s.sendall(os.urandom(random.randint(68, 4096)))  # a shorter answer waits for the auth deadline (slow_client)
            return outcome(s, 5.0)

    def huge_length(self):
        with connect(self.port) as s:
            if random.random() < 0.5:
                read_hello(s)
                s.sendall(b"DTC1" + os.urandom(NONCE + MAC) + b"\xff\xff\xff\xff" + b"x" * 64)
            else:
                if authenticate(s, self.secret) is None:
                    return "refused"
                s.sendall(struct.pack("<I", random.choice([0xFFFFFFFF, (64 << 20) + 1])))
            return outcome(s, 5.0)

    def wrong_secret(self):
        with connect(self.port) as s:
            sn = read_hello(s)
            if sn is None:
                return "refused"
            cn = secrets.token_bytes(NONCE)
            s.sendall(b"DTC1" + cn + mac("not-" + self.secret, b"dtstore-v1 client", sn, cn))
            return outcome(s, 5.0)

    def replay(self):
        if self.replay_msg is None:
            with connect(self.port) as s:
                self.replay_msg = authenticate(s, self.secret)
            if self.replay_msg is None:
                return "refused"
        with connect(self.port) as s:
            if read_hello(s) is None:
                return "refused"
            s.sendall(self.replay_msg)
            return outcome(s, 5.0)

    def slow_client(self):
        with connect(self.port) as s:
            if read_hello(s) is None:
                return "refused"
            msg = b"DTC1" + os.urandom(NONCE + MAC)
            for b in msg:
                if self.stop.is_set():
                    return "timed_out"
                try:
                    s.sendall(bytes([b]))
                except OSError:
                    return "closed"
                s.settimeout(1.0)
                try:
                    if s.recv(1) == b"":
                        return "closed"
                except socket.timeout:
                    pass
                except OSError:
                    return "closed"
            return outcome(s, 2.0)

    def flood(self, n):
        socks = []
        try:
            for _ in range(n):
                try:
                    socks.append(connect(self.port, timeout=2.0))
                except OSError:
                    self.count("flood", None)
                    self.count("flood", "connect_refused")
            for s in socks:
                self.count("flood", None)
                s.settimeout(2.0)
                self.count("flood", "admitted" if read_hello(s) is not None else "refused")
            self.stop.wait(1.0)
        finally:
            for s in socks:
                s.close()

    def legit(self):
        # Like TcpStore, retry while the server refuses new connections (the flood holds every authentication slot).
        deadline = time.time() + 10
        retried = False
        while True:
            s = connect(self.port)
            if authenticate(s, self.secret) is not None:
                break
            s.close()
            if time.time() > deadline:
                return "failed"
            retried = True
            time.sleep(0.05)
        with s:
            result = self.round_trip(s)
            return result + "_after_retry" if result == "ok" and retried else result

    def round_trip(self, s):
        key = b"attack/legit/" + secrets.token_hex(4).encode()
        val = secrets.token_bytes(16)
        s.sendall(frame(b"\x01" + sstr(key) + sstr(val)))
        h = recv_exact(s, 4)
        if h is None or recv_exact(s, struct.unpack("<I", h)[0]) != b"\x00":
            return "failed"
        s.sendall(frame(b"\x02" + sstr(key) + struct.pack("<Q", 1000)))
        h = recv_exact(s, 4)
        body = recv_exact(s, struct.unpack("<I", h)[0]) if h else None
        return "ok" if body == b"\x00" + sstr(val) else "failed"


def vm_rss_kb(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def losses(stdout):
    out = []
    for line in stdout.splitlines():
        if line.startswith("{") and '"step"' in line:
            try:
                out.append(json.loads(line)["loss"])
            except (ValueError, KeyError):
                pass
    return out


def run_job(dtrun, train, steps, port, secret, attack_s=None, flood_n=0):
    env = dict(os.environ, DT_STORE_SECRET=secret, DT_LOG="error")
    cmd = [dtrun, "--nproc-per-node", "2", "--master-port", str(port), "--timeout", "60", train, *TRAIN,
           "--steps", str(steps)]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    report = None
    if attack_s is not None:
        report = attack_job(p, port, secret, attack_s, flood_n)
    out, err = p.communicate(timeout=240)
    return p.returncode, out, err, report


def attack_job(p, port, secret, attack_s, flood_n):
    # The store is up once it answers a legit client; dtrun's RSS then is the baseline.
    deadline = time.time() + 10
    while True:
        try:
            with connect(port, timeout=1.0) as s:
                if authenticate(s, secret) is not None:
                    break
        except OSError:
            pass
        if time.time() > deadline or p.poll() is not None:
            raise SystemExit("store_attack: FAIL: the store did not come up")
        time.sleep(0.02)
    rss_before = vm_rss_kb(p.pid)
    stop = threading.Event()
    a = Attack(port, secret, stop, p)
    threads = [threading.Thread(target=a.loop, args=(kind, getattr(a, kind), pause), daemon=True)
               for kind, pause in [("port_scan", 0.005), ("random_bytes", 0.01), ("huge_length", 0.02),
                                   ("wrong_secret", 0.01), ("replay", 0.02), ("legit", 0.25)]]
    threads += [threading.Thread(target=a.loop, args=("slow_client", a.slow_client, 0.1), daemon=True)
                for _ in range(4)]
    threads.append(threading.Thread(target=lambda: [a.flood(flood_n) for _ in range(2) if not stop.is_set()],
                                    daemon=True))
    for t in threads:
        t.start()
    rss = []
    end = time.time() + attack_s
    while time.time() < end and p.poll() is None:
        r = vm_rss_kb(p.pid)
        if r:
            rss.append(r)
        time.sleep(0.1)
    job_outlived_attack = p.poll() is None
    stop.set()
    for t in threads:
        t.join(timeout=15)
    alive = [t.name for t in threads if t.is_alive()]
    return dict(counts={k: dict(v) for k, v in a.counts.items()}, errors=a.errors + [f"thread {n} hung" for n in alive],
                rss_before_kb=rss_before, rss_max_kb=max(rss) if rss else None, rss_samples=len(rss),
                job_outlived_attack=job_outlived_attack)


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    long_run = "--long" in sys.argv[1:]
    if len(args) != 2:
        print(__doc__)
        return 2
    dtrun, train = args
    steps, attack_s, flood_n = (3000, 120, 400) if long_run else (500, 12, 300)
    secret = secrets.token_hex(32)
    failures = []

    t0 = time.time()
    rc, out, err, _ = run_job(dtrun, train, steps, free_port(), secret)
    quiet = losses(out)
    quiet_s = time.time() - t0
    if rc != 0 or len(quiet) != steps:
        print(err)
        raise SystemExit(f"store_attack: FAIL: the quiet run failed (exit {rc}, {len(quiet)} of {steps} losses)")
    print(f"store_attack: quiet run: {steps} steps in {quiet_s:.1f} s, final loss {quiet[-1]:.6f}")

    t0 = time.time()
    rc, out, err, rep = run_job(dtrun, train, steps, free_port(), secret, attack_s, flood_n)
    attacked = losses(out)
    print(f"store_attack: attacked run: exit {rc} in {time.time() - t0:.1f} s, "
          f"{len(attacked)} losses{', final ' + format(attacked[-1], '.6f') if attacked else ''}")
    if rc != 0:
        failures.append(f"the attacked job exited {rc}: {err.strip()[-2000:]}")
    if attacked != quiet:
        failures.append(f"the attacked job's losses differ from the quiet run's ({len(attacked)} vs {len(quiet)})")
    if not rep["job_outlived_attack"]:
        print("store_attack: note: the job finished before the attack window ended (attacks ran while it lasted)")

    print(f"{'attack':<14}{'attempts':>9}  outcomes")
    for kind in ["port_scan", "random_bytes", "huge_length", "wrong_secret", "replay", "slow_client", "flood", "legit"]:
        c = dict(rep["counts"].get(kind, {}))
        n = c.pop("attempts", 0)
        print(f"{kind:<14}{n:>9}  " + ", ".join(f"{k} {v}" for k, v in sorted(c.items())))
        if kind != "legit" and c.get("accepted"):
            failures.append(f"{kind}: the server answered DTOK to {c['accepted']} attack(s)")
        if kind in ("random_bytes", "wrong_secret", "replay") and c.get("timed_out"):
            failures.append(f"{kind}: {c['timed_out']} connection(s) not closed within 5 s")
        if n == 0:
            failures.append(f"{kind}: no attempt was made")
        if c.get("connect_refused"):
            failures.append(f"{kind}: {c['connect_refused']} connect(s) refused while the job ran (the listener failed)")
    legit = rep["counts"].get("legit", {})
    legit_ok = legit.get("ok", 0) + legit.get("ok_after_retry", 0)
    if legit_ok != legit.get("attempts", 0) - legit.get("after_job_end", 0):
        failures.append(f"legit: {legit_ok} of {legit.get('attempts', 0)} round trips succeeded")
    print(json.dumps({"store_attack": rep["counts"], "rss_before_kb": rep["rss_before_kb"],
                      "rss_max_kb": rep["rss_max_kb"], "rss_samples": rep["rss_samples"]}))
    if rep["rss_before_kb"] and rep["rss_max_kb"]:
        grew = (rep["rss_max_kb"] - rep["rss_before_kb"]) / 1024
        print(f"store_attack: dtrun VmRSS {rep['rss_before_kb'] / 1024:.1f} MiB before, "
              f"{rep['rss_max_kb'] / 1024:.1f} MiB at most during the attack (+{grew:.1f} MiB)")
        if grew > RSS_LIMIT_MB:
            failures.append(f"dtrun's RSS grew by {grew:.1f} MiB during the attack (limit {RSS_LIMIT_MB})")
    failures += rep["errors"]
    for f in failures:
        print("store_attack: FAIL:", f)
    print(f"store_attack: {'FAIL' if failures else 'ok'}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
