#!/usr/bin/env python3
"""Runs dtplan on valid and invalid specs; checks output, JSON and exit codes.

Usage: dtplan_test.py PATH_TO_DTPLAN
The expected local shapes are computed here from torch.chunk's definition, independently of dtplan.
"""
import json
import subprocess
import sys

DTPLAN = sys.argv[1]
failures = []


def run(*args):
    p = subprocess.run([DTPLAN, *args], capture_output=True, text=True, timeout=30)
    return p.returncode, p.stdout, p.stderr


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what)


def chunk(n, k, i):
    """(offset, size) of chunk i of torch.chunk over n elements into k parts (empty past the last chunk)."""
    split = -(-n // k) if n else 0
    start = 0
    for _ in range(i):
        if start >= n:
            break
        start += split
    if start >= n:
        return n, 0
    return start, min(split, n - start)


# Valid: the example of the issue, with names and a target.
rc, out, err = run("--shape", "7,5", "--mesh", "2,3", "--names", "dp,tp", "--from", "S(0),R", "--to", "R,S(1)",
                   "--json")
check(rc == 0, f"valid --json exits 0 (got {rc}, stderr {err!r})")
doc = json.loads(out) if rc == 0 else {}
ranks = doc.get("ranks", [])
check(len(ranks) == 6, "six ranks listed")
for r in ranks:
    c0, c1 = r["coord"]
    check(r["rank"] == c0 * 3 + c1, f"row-major coordinate of rank {r['rank']}")
    off, size = chunk(7, 2, c0)
    check(r["local_shape"] == [size, 5], f"local shape of rank {r['rank']}: {r['local_shape']}")
    check(r["offset"] == [off, 0], f"offset of rank {r['rank']}: {r['offset']}")
    check(r["bytes"] == size * 5 * 4, f"bytes of rank {r['rank']}: {r['bytes']}")
for r in doc.get("target_ranks", []):
    off, size = chunk(5, 3, r["coord"][1])
    check(r["local_shape"] == [7, size] and r["offset"] == [0, off], f"target layout of rank {r['rank']}")
plan = doc.get("plan", [])
kinds = sorted((s["mesh_dim"], s["kind"]) for s in plan)
check(kinds == [(0, "all_gather"), (1, "local_slice")], f"plan steps {kinds}")
check(all("bytes_moved" in s and s["from"] and s["to"] for s in plan), "steps carry bytes and placements")
check(isinstance(doc.get("cost"), (int, float)) and doc["cost"] > 0, "plan has a positive cost")
check(abs(sum(s["cost"] for s in plan) - doc.get("cost", 0)) <= 1e-6 * doc.get("cost", 1), "cost is the steps' sum")

# Text output of the same, and --dtype.
rc, out, err = run("--shape", "7,5", "--mesh", "2,3", "--from", "S(0),R", "--to", "R,S(1)", "--dtype", "bf16")
check(rc == 0, f"valid text exits 0 (got {rc}, stderr {err!r})")
check("all_gather" in out and "local_slice" in out and "plan: 2 steps" in out, "text output lists the plan")
check("40" in out, "bf16 rank 0 holds 4*5*2 = 40 bytes")

# Layout only (no --to): no plan in the JSON; nested order syntax and uneven/empty shards.
rc, out, err = run("--shape", "5", "--mesh", "2,2", "--from", "S(0)[1],S(0)[0]", "--json")
check(rc == 0, f"nested order exits 0 (got {rc}, stderr {err!r})")
if rc == 0:
    doc = json.loads(out)
    check("plan" not in doc, "no plan without --to")
    check(doc["from"] == "S(0)[1],S(0)[0]", "spec printed back in the same syntax")
    for r in doc["ranks"]:
        c0, c1 = r["coord"]
        o1, s1 = chunk(5, 2, c1)  # mesh dim 1 splits first
        o0, s0 = chunk(s1, 2, c0)
        check(r["local_shape"] == [s0] and r["offset"] == [o1 + o0], f"nested layout of rank {r['rank']}: {r}")
rc, out, err = run("--shape", "5", "--mesh", "4", "--from", "S(0)", "--json")
check(rc == 0 and [r["local_shape"][0] for r in json.loads(out)["ranks"]] == [2, 2, 1, 0], "torch.chunk 5 over 4")

rc, out, err = run("--help")
check(rc == 0 and "[k]" in out and "S(0)[1],S(0)[0]" in out, "--help documents the order syntax")

# Invalid: each exits 2 with a message naming the problem on stderr and nothing on stdout.
bad = [
    (["--shape", "7,5", "--mesh", "2,3", "--from", "S(2),R"], "S(2)"),
    (["--shape", "7,5", "--mesh", "2,0", "--from", "S(0),R"], "size 0"),
    (["--shape", "7,5", "--mesh", "2,-1", "--from", "S(0),R"], "-1"),
    (["--shape", "7,5", "--mesh", "2,3", "--from", "S(0)"], "1 placement"),
    (["--shape", "7,5", "--mesh", "2,3", "--from", "S(0),R", "--to", "P(sum),R"], "Shard -> Partial"),
    (["--shape", "7,5", "--mesh", "2,3", "--from", "P(sum),P(max)", "--to", "R,R"], "P(sum),P(max)"),
    (["--shape", "7,5", "--mesh", "2,3", "--from", "Q(0),R"], "Q(0)"),
    (["--shape", "7,x", "--mesh", "2,3", "--from", "S(0),R"], "'x'"),
    (["--shape", "7,5", "--mesh", "2,3", "--names", "dp,dp", "--from", "S(0),R"], "dp"),
    (["--shape", "7,5", "--mesh", "2,3", "--from", "S(0),R", "--dtype", "f7"], "f7"),
    (["--shape", "7,5", "--mesh", "2,3"], "--from"),
    (["--shape", "7,5", "--mesh", "2,3", "--from", "S(0),R", "--bogus"], "--bogus"),
    # Found by the placement_parsers fuzz target: a mesh of 2^40 ranks was accepted and its rank list (8 TiB) allocated.
    (["--shape", "7", "--mesh", "1099511627776", "--from", "R"], "16777216"),
    (["--shape", "7", "--mesh", "4096,4097", "--from", "R,R"], "16777216"),
    # Found by the same target: sizes past int64 were clamped to INT64_MAX by strtoll and accepted.
    (["--shape", "99999999999999999999", "--mesh", "2", "--from", "R"], "'99999999999999999999'"),
    # A shape whose bytes overflow int64.
    (["--shape", "4611686018427387904", "--mesh", "2", "--from", "S(0)"], "more bytes than an int64"),
]
for args, needle in bad:
    rc, out, err = run(*args)
    check(rc == 2, f"{args} exits 2 (got {rc})")
    check(needle in err, f"{args}: stderr names {needle!r}: {err.strip()!r}")
    check(out == "", f"{args}: nothing on stdout")

print(f"dtplan: {len(failures)} failure(s)")
sys.exit(1 if failures else 0)
