#!/usr/bin/env python3
"""Tests of the checkpoint inspector dtckpt, one case per invocation.

Usage: test_dtckpt.py DTCKPT HELPER CASE   (CASE: info, verify, export, latest, usage)
checkpoint_helper saves sharded DTensors of every dtype on a 2x2 thread mesh and writes a reference computed from the
full tensors; each case runs dtckpt on that checkpoint and compares what it prints or writes with the reference and
with the checkpoint's index read here directly. Exit 0 on success, 1 on failure.
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from checkpoint_ref import DTYPES, box_bytes, numel, read_reference, read_safetensors  # noqa: E402

DTCKPT, HELPER, CASE = sys.argv[1], sys.argv[2], sys.argv[3]


def fail(msg, p=None):
    print("FAIL:", msg)
    if p is not None:
        print("--- command:", " ".join(p.args))
        print("--- exit code:", p.returncode)
        print("--- stdout:\n" + p.stdout)
        print("--- stderr:\n" + p.stderr)
    sys.exit(1)


def check(cond, msg, p=None):
    if not cond:
        fail(msg, p)


def run(args, want_rc=0):
    p = subprocess.run(args, capture_output=True, text=True, timeout=60)
    check(p.returncode >= 0, "killed by a signal (a crash)", p)
    if want_rc is not None:
        check(p.returncode == want_rc, f"exit code {p.returncode}, expected {want_rc}", p)
    return p


def dtckpt(*args, want_rc=0):
    return run([DTCKPT, *args], want_rc)


def make_checkpoint(tmp):
    ck, ref = os.path.join(tmp, "ck"), os.path.join(tmp, "ref")
    run([HELPER, "save", ck, ref])
    tensors, metadata = read_reference(ref)
    with open(os.path.join(ck, "dtensor.index.json")) as f:
        index = json.load(f)
    return ck, tensors, metadata, index


def check_tensor_rows(got, ref, what):
    check([t["name"] for t in got] == [t["name"] for t in ref], f"{what}: the names in saved order")
    for g, r in zip(got, ref):
        check(g["dtype"] == DTYPES[r["dtype"]][0], f"{what}: {r['name']} dtype {g['dtype']}, saved {r['dtype']}")
        check(g["shape"] == r["shape"], f"{what}: {r['name']} shape {g['shape']}, saved {r['shape']}")
        check(g["bytes"] == len(r["data"]), f"{what}: {r['name']} bytes {g['bytes']}, saved {len(r['data'])}")


def case_info(tmp):
    ck, ref, metadata, index = make_checkpoint(tmp)
    info = json.loads(dtckpt("info", "--json", ck).stdout)
    check(info["kind"] == "checkpoint" and info["world_size"] == 4 and info["page_bytes"] == 256,
          f"kind, world size 4, pages of 256 bytes: {info}")
    check(info["save_id"] == index["save_id"] and info["save_id"], "the save id of the index")
    check(info["metadata"] == metadata, f"metadata {info['metadata']}, saved {metadata}")
    check_tensor_rows(info["tensors"], ref, "info --json")
    for g, r in zip(info["tensors"], ref):
        check(g["spec"] == r["spec"], f"{r['name']}: spec {g['spec']!r}, saved from {r['spec']!r}")
        check("chunks" not in g, "chunks are listed only with --chunks")
    check(info["totals"] == {"tensors": len(ref), "chunks": sum(len(t["chunks"]) for t in index["tensors"]),
                             "bytes": sum(len(t["data"]) for t in ref),
                             "file_bytes": sum(index["files"].values())}, f"totals {info['totals']}")
    check({f["name"]: f["bytes"] for f in info["files"]} == index["files"], "files and their sizes")

    # --chunks: each chunk as the index says, and the file bytes it points at are that box of the saved tensor.
    info = json.loads(dtckpt("info", ck, "--json", "--chunks").stdout)
    chunks_seen = 0
    for g, r, ix in zip(info["tensors"], ref, index["tensors"]):
        check(g["num_chunks"] == len(g["chunks"]) == len(ix["chunks"]), f"{r['name']}: chunk count")
        elem = DTYPES[r["dtype"]][1]
        covered = 0
        for c, ic in zip(g["chunks"], ix["chunks"]):
            check((c["offset"], c["shape"], c["file"], c["begin"], c["end"] - c["begin"]) ==
                  (ic["offset"], ic["shape"], ic["file"], ic["begin"], ic["bytes"]), f"{r['name']}: chunk {c}")
            check(c["pages"] == len(ic["crc32c"]) // 8 == -(-(c["end"] - c["begin"]) // 256),
                  f"{r['name']}: pages of 256 bytes in {c}")
            with open(os.path.join(ck, c["file"]), "rb") as f:
                f.seek(c["begin"])
                stored = f.read(c["end"] - c["begin"])
            check(stored == box_bytes(r["data"], r["shape"], elem, c["offset"], c["shape"]),
                  f"{r['name']}: the bytes of chunk {c} are not that box of the saved tensor")
            covered += numel(c["shape"])
            chunks_seen += 1
        check(covered == numel(r["shape"]), f"{r['name']}: the chunks cover {covered} of {numel(r['shape'])} elements")
    check(chunks_seen > len(ref), "sharded tensors have several chunks")
    check(any(len(t["chunks"]) == 4 for t in info["tensors"]), "a tensor sharded over all 4 ranks")

    # The text form: a header line, the metadata, one row per tensor, the totals; --chunks adds a line per chunk.
    text = dtckpt("info", ck).stdout
    check(f"save id {index['save_id']}, world size 4" in text, "the header line", None)
    check(re.search(r"metadata: .*lr=0\.25.*step=100", text), f"the metadata line in:\n{text}")
    for r in ref:
        row = [ln for ln in text.splitlines() if ln.split()[:1] == [r["name"]]]
        check(len(row) == 1, f"one row for {r['name']} in:\n{text}")
        check(row[0].split()[-1] == str(len(r["data"])) and DTYPES[r["dtype"]][0] in row[0].split(),
              f"{r['name']}'s row: {row[0]}")
    total_chunks = sum(len(t["chunks"]) for t in index["tensors"])
    check(f"total: {len(ref)} tensors, {total_chunks} chunks, {sum(len(t['data']) for t in ref)} bytes" in text,
          f"the totals line in:\n{text}")
    text = dtckpt("info", "--chunks", ck).stdout
    check(len(re.findall(r"^\s+offset \[", text, re.M)) == total_chunks, f"one line per chunk in:\n{text}")


def file_of(index, name):
    t = next(t for t in index["tensors"] if t["name"] == name)
    c = max(t["chunks"], key=lambda c: c["bytes"])
    return c["file"], c["begin"] + c["bytes"] // 2


def case_verify(tmp):
    ck, ref, _, index = make_checkpoint(tmp)
    p = dtckpt("verify", ck)
    chunk_bytes = sum(c["bytes"] for t in index["tensors"] for c in t["chunks"])
    m = re.search(r"(\d+) bytes checked in [0-9.]+ s, [0-9.]+ GB/s: ok", p.stdout)
    check(m and int(m.group(1)) == chunk_bytes == sum(len(t["data"]) for t in ref),
          f"verify reports the {chunk_bytes} bytes of the chunks", p)

    # One flipped byte in the middle of model.w's largest chunk: refused, naming the tensor and the file.
    fname, at = file_of(index, "model.w")
    path = os.path.join(ck, fname)
    with open(path, "r+b") as f:
        f.seek(at)
        b = f.read(1)
        f.seek(at)
        f.write(bytes([b[0] ^ 0x10]))
    p = dtckpt("verify", ck, want_rc=1)
    check("model.w" in p.stderr and fname in p.stderr, "the error names the tensor and the file", p)
    check(p.stderr.startswith("dtckpt: ") and not p.stdout, "one error on stderr", p)
    with open(path, "r+b") as f:
        f.seek(at)
        f.write(b)
    dtckpt("verify", ck)

    # A truncated file, then a missing one: refused, naming the file.
    fname, _ = file_of(index, "ids")
    path = os.path.join(ck, fname)
    saved = open(path, "rb").read()
    with open(path, "r+b") as f:
        f.truncate(len(saved) - 3)
    p = dtckpt("verify", ck, want_rc=1)
    check(fname in p.stderr and "truncated" in p.stderr, "a truncated file is named", p)
    os.remove(path)
    p = dtckpt("verify", ck, want_rc=1)
    check(fname in p.stderr, "a missing file is named", p)
    with open(path, "wb") as f:
        f.write(saved)
    dtckpt("verify", ck)

    # A damaged index, and a folder that holds no checkpoint.
    with open(os.path.join(ck, "dtensor.index.json"), "r+b") as f:
        f.seek(40)
        f.write(b"9")
    p = dtckpt("verify", ck, want_rc=1)
    check("dtensor.index.json" in p.stderr, "a damaged index is named", p)
    empty = os.path.join(tmp, "empty")
    os.mkdir(empty)
    dtckpt("verify", empty, want_rc=1)


def check_export(entries, ref, what):
    check(list(entries) == [t["name"] for t in ref], f"{what}: the tensors in saved order: {list(entries)}")
    for r in ref:
        e = entries[r["name"]]
        check(e["dtype"] == r["dtype"] and e["shape"] == r["shape"], f"{what}: {r['name']} is {e['dtype']} "
              f"{e['shape']}, saved {r['dtype']} {r['shape']}")
        check(e["data"] == r["data"], f"{what}: {r['name']}'s bytes differ from the tensor saved")


def case_export(tmp):
    ck, ref, _, _ = make_checkpoint(tmp)
    out = os.path.join(tmp, "out", "model.safetensors")
    p = dtckpt("export", ck, out)
    check(f"{len(ref)} tensors, 1 file" in p.stdout, "export says what it wrote", p)
    entries, metadata = read_safetensors(out)
    check(metadata == {"format": "pt"}, f"metadata {metadata}")
    check_export(entries, ref, out)
    info = json.loads(dtckpt("info", "--json", out).stdout)
    check(info["kind"] == "safetensors" and info["metadata"] == {"format": "pt"}, f"info of the file: {info}")
    check_tensor_rows(info["tensors"], ref, "info of the exported file")
    check(all(t["num_chunks"] == (1 if t["bytes"] else 0) and t["spec"] == "" for t in info["tensors"]),
          "a plain file holds whole tensors")
    check(os.listdir(os.path.dirname(out)) == ["model.safetensors"], "no temporary file left")

    # Hugging Face shards of at most 400 bytes (0.4KB), and of 256 (0.25KiB).
    total = sum(len(t["data"]) for t in ref)
    for size, limit in (("0.4KB", 400), ("0.25KiB", 256)):
        idx = os.path.join(tmp, "hf" + str(limit), "model.safetensors.index.json")
        p = dtckpt("export", ck, idx, "--max-shard-size", size)
        with open(idx) as f:
            hf = json.load(f)
        check(hf["metadata"]["total_size"] == total, f"total_size {hf['metadata']['total_size']}, saved {total}")
        check(list(hf["weight_map"]) == [t["name"] for t in ref] or
              sorted(hf["weight_map"]) == sorted(t["name"] for t in ref), "the weight map names every tensor")
        files = sorted(set(hf["weight_map"].values()))
        check(len(files) > 1 and all(re.fullmatch(rf"model-{i + 1:05d}-of-{len(files):05d}\.safetensors", f)
                                     for i, f in enumerate(files)), f"shard names {files}")
        merged = {}
        for fname in files:
            entries, metadata = read_safetensors(os.path.join(os.path.dirname(idx), fname))
            size_in = sum(len(e["data"]) for e in entries.values())
            check(size_in <= limit or len(entries) == 1, f"{fname} holds {size_in} bytes, more than {limit}")
            check(all(hf["weight_map"][n] == fname for n in entries), f"the weight map points at {fname}")
            merged.update(entries)
        check_export({t["name"]: merged[t["name"]] for t in ref}, ref, idx)
        check(all(os.path.join(os.path.dirname(idx), f) in p.stdout for f in files), "export lists the shards", p)
        info = json.loads(dtckpt("info", "--json", idx).stdout)
        check(info["kind"] == "hf_index" and len(info["files"]) == len(files), f"info of the index: {info}")
        check_tensor_rows(info["tensors"], ref, "info of the HF index")


def case_latest(tmp):
    root = os.path.join(tmp, "root")
    os.mkdir(root)
    p = dtckpt("latest", root, want_rc=1)
    check("no complete checkpoint" in p.stderr and not p.stdout, "an empty folder has none", p)
    dtckpt("latest", os.path.join(tmp, "missing"), want_rc=1)
    run([HELPER, "steps", root])
    check(dtckpt("latest", root).stdout.strip() == os.path.join(root, "step-20"), "the greatest step")
    # A newer save that never committed its index, and one whose index is damaged: neither counts.
    os.mkdir(os.path.join(root, "step-50"))
    shutil.copy(os.path.join(root, "step-20", "dtensor.index.json"), os.path.join(root, "step-50", "x.json"))
    shutil.copytree(os.path.join(root, "step-20"), os.path.join(root, "step-99"))
    with open(os.path.join(root, "step-99", "dtensor.index.json"), "r+b") as f:
        f.seek(30)
        f.write(b"#")
    p = dtckpt("latest", root)
    check(p.stdout.strip() == os.path.join(root, "step-20"), "incomplete and damaged folders are skipped", p)
    dtckpt("verify", p.stdout.strip())
    # The root where one checkpoint is expected: refused, pointing at the newest.
    for cmd in (["info", root], ["verify", root], ["export", root, os.path.join(tmp, "x.safetensors")]):
        p = dtckpt(*cmd, want_rc=1)
        check(os.path.join(root, "step-20") in p.stderr and len(p.stderr.splitlines()) == 1, "the hint", p)


def case_usage(tmp):
    ck, _, _, _ = make_checkpoint(tmp)
    p = dtckpt("--help")
    check(p.stdout.startswith("usage: dtckpt") and "--max-shard-size" in p.stdout, "--help prints the usage", p)
    junk = os.path.join(tmp, "junk.safetensors")
    with open(junk, "wb") as f:
        f.write(b"\xff" * 8 + b"{}")
    huge = os.path.join(tmp, "huge.safetensors")
    with open(huge, "wb") as f:
        f.write((10 ** 12).to_bytes(8, "little") + b"{}")
    not_json = os.path.join(tmp, "bad.index.json")
    with open(not_json, "w") as f:
        f.write("{\"weight_map\": {\"a\": \"../x.safetensors\"}}")
    usage = [[], ["bogus", ck], ["info"], ["info", ck, ck], ["verify", "--json", ck], ["latest", "--chunks", ck],
             ["info", "--max-shard-size", "1GB", ck], ["info", "--bogus", ck], ["info", "--json=1", ck],
             ["export", ck], ["export", ck, os.path.join(tmp, "o.json")],
             ["export", ck, os.path.join(tmp, "o.bin")],
             ["export", ck, os.path.join(tmp, "o.safetensors"), "--max-shard-size", "1GB"],
             ["export", ck, os.path.join(tmp, "o.json"), "--max-shard-size"],
             ["verify", junk], ["export", junk, os.path.join(tmp, "o.safetensors")]]
    for size in ("5XB", "-5GB", "+5GB", "0", "0.0001KB", "GB", "1e30", "nan", "inf", "5 GB", "1.2.3MB", ".", "0x10",
                 "1e30GB", "99999999TB"):
        usage.append(["export", ck, os.path.join(tmp, "o.json"), "--max-shard-size", size])
    for args in usage:
        p = dtckpt(*args, want_rc=2)
        check(p.stderr.startswith("dtckpt: ") and "dtckpt --help" in p.stderr and not p.stdout,
              f"a usage error for {args}", p)
    for args in (["info", os.path.join(tmp, "missing")], ["info", junk], ["info", huge], ["info", not_json],
                 ["export", os.path.join(tmp, "missing"), os.path.join(tmp, "o.safetensors")],
                 ["info", tmp], ["verify", os.path.join(tmp, "missing")]):
        p = dtckpt(*args, want_rc=1)
        check(p.stderr.startswith("dtckpt: ") and len(p.stderr.strip().splitlines()) == 1 and not p.stdout,
              f"one error line for {args}", p)
    check(not os.path.exists(os.path.join(tmp, "o.safetensors")) and not os.path.exists(os.path.join(tmp, "o.json")),
          "nothing written on a refused export")
    # Sizes that are accepted: plain bytes and every unit.
    for size in ("4096", "4096B", "4KB", "0.004MB", "4kib", "1GiB", "5GB", "1TB", ".5KB", "2.MB"):
        dtckpt("export", ck, os.path.join(tmp, "sz", "m.json"), "--max-shard-size=" + size)


def main():
    cases = {"info": case_info, "verify": case_verify, "export": case_export, "latest": case_latest,
             "usage": case_usage}
    if CASE not in cases:
        fail(f"unknown case {CASE}")
    tmp = tempfile.mkdtemp(prefix="dtckpt_test_")
    try:
        cases[CASE](tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"dtckpt {CASE}: ok")


if __name__ == "__main__":
    main()
