#!/usr/bin/env python3
"""The Python ecosystem reads what dtensor exports, and dtensor imports what it writes (issue #17).

Usage: test_safetensors_export.py HELPER
HELPER is tests/tools/checkpoint_helper. Forward: it exports DTensors of every dtype, sharded on a 2x2 thread mesh
(uneven, empty and nested shards), to one safetensors file and to Hugging Face shards, with a reference computed from
the full tensors; the safetensors package (NumPy, and PyTorch when importable) must load every tensor bit for bit.
Backward: safetensors.numpy.save_file writes known values (one file, and two files with a hand-written HF index),
and the helper imports them into several sharded layouts and compares with the values' own bytes.

Runs under the virtual environment that `./dev deps` makes (DT_PY_VENV, the folder; it re-executes itself there).
Exit 0 on success, 1 on failure, 77 (skipped, with the reason) when numpy or safetensors is not importable.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


sys.path.insert(0, HERE)
from py_venv import reexec_in_venv, skip_unless_importable  # noqa: E402

reexec_in_venv()
skip_unless_importable("numpy", "safetensors")
import numpy as np  # noqa: E402
import safetensors  # noqa: E402
import safetensors.numpy  # noqa: E402
from safetensors import safe_open  # noqa: E402

try:
    import torch
    import safetensors.torch
except ImportError:
    torch = None

sys.path.insert(0, os.path.join(HERE, "..", "tools"))
from checkpoint_ref import read_reference, read_safetensors, write_reference  # noqa: E402

HELPER = sys.argv[1]
NUMPY_DTYPES = {"F32": np.float32, "F64": np.float64, "F16": np.float16, "I64": np.int64, "I32": np.int32,
                "I8": np.int8, "U8": np.uint8, "BOOL": np.bool_}
TORCH_DTYPES = {} if torch is None else {
    "F32": torch.float32, "F64": torch.float64, "F16": torch.float16, "BF16": torch.bfloat16, "I64": torch.int64,
    "I32": torch.int32, "I8": torch.int8, "U8": torch.uint8, "BOOL": torch.bool}
checked = {"numpy": 0, "raw": 0, "torch": 0}


def check(cond, msg):
    if not cond:
        print("FAIL:", msg)
        sys.exit(1)


def run(args, want_rc=0):
    p = subprocess.run(args, capture_output=True, text=True, timeout=120)
    check(p.returncode == want_rc, f"{' '.join(args)}: exit code {p.returncode}, expected {want_rc}\n"
          f"--- stdout:\n{p.stdout}--- stderr:\n{p.stderr}")
    return p


def check_numpy(arr, r, where):
    check(arr.dtype == NUMPY_DTYPES[r["dtype"]] and list(arr.shape) == r["shape"],
          f"{where}: {r['name']} loads as {arr.dtype} {list(arr.shape)}, saved {r['dtype']} {r['shape']}")
    check(np.ascontiguousarray(arr).tobytes() == r["data"], f"{where}: {r['name']}'s values differ from the saved ones")
    checked["numpy"] += 1


def check_torch(t, r, where):
    check(t.dtype == TORCH_DTYPES[r["dtype"]] and list(t.shape) == r["shape"],
          f"{where}: {r['name']} loads as {t.dtype} {list(t.shape)}, saved {r['dtype']} {r['shape']}")
    raw = t.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()
    check(raw == r["data"], f"{where}: {r['name']}'s values differ from the saved ones (torch)")
    checked["torch"] += 1


def check_file(path, refs, where):
    """Every tensor of `refs` in the file at `path`, through safe_open (NumPy; BF16 by its raw bytes, which NumPy
    cannot hold) and, with torch, safetensors.torch.load_file."""
    raw, _ = read_safetensors(path)
    with safe_open(path, framework="numpy") as f:
        check(f.metadata() == {"format": "pt"}, f"{where}: metadata {f.metadata()}")
        check(sorted(f.keys()) == sorted(r["name"] for r in refs), f"{where}: names {sorted(f.keys())}")
        for r in refs:
            if r["dtype"] == "BF16":
                s = f.get_slice(r["name"])
                check(s.get_dtype() == "BF16" and list(s.get_shape()) == r["shape"], f"{where}: {r['name']}'s slice")
                check(raw[r["name"]]["data"] == r["data"], f"{where}: {r['name']}'s bytes differ from the saved ones")
                checked["raw"] += 1
            else:
                check_numpy(f.get_tensor(r["name"]), r, where)
    if torch is not None:
        loaded = safetensors.torch.load_file(path)
        for r in refs:
            check_torch(loaded[r["name"]], r, where + " (torch)")


def exported_by_dtensor(tmp):
    ref_prefix = os.path.join(tmp, "ref")
    run([HELPER, "export", tmp, ref_prefix])
    refs, _ = read_reference(ref_prefix)
    check({r["dtype"] for r in refs} >= set(NUMPY_DTYPES) | {"BF16"}, "the helper exports every dtype")

    check_file(os.path.join(tmp, "model.safetensors"), refs, "model.safetensors")

    # safetensors.numpy.load_file: the whole file at once (it has no BF16 tensor).
    path = os.path.join(tmp, "no_bf16.safetensors")
    loaded = safetensors.numpy.load_file(path)
    plain = [r for r in refs if r["dtype"] != "BF16"]
    check(sorted(loaded) == sorted(r["name"] for r in plain), f"no_bf16.safetensors: names {sorted(loaded)}")
    for r in plain:
        check_numpy(loaded[r["name"]], r, "load_file(no_bf16.safetensors)")

    # Hugging Face shards: the index names every tensor once, each shard holds what it says.
    hf = os.path.join(tmp, "hf")
    with open(os.path.join(hf, "model.safetensors.index.json")) as f:
        index = json.load(f)
    check(index["metadata"]["total_size"] == sum(len(r["data"]) for r in refs), f"total_size {index['metadata']}")
    check(sorted(index["weight_map"]) == sorted(r["name"] for r in refs), "the weight map names every tensor")
    shards = sorted(set(index["weight_map"].values()))
    check(len(shards) >= 3, f"shards of at most 400 bytes: {shards}")
    for shard in shards:
        in_shard = [r for r in refs if index["weight_map"][r["name"]] == shard]
        check_file(os.path.join(hf, shard), in_shard, "hf/" + shard)


def numpy_values():
    rng = np.random.default_rng(17)
    return {
        "embed.weight": rng.standard_normal((13, 7)).astype(np.float32),
        "stats": rng.standard_normal((5, 3, 2)),
        "half": rng.standard_normal((4, 9)).astype(np.float16),
        "ids": rng.integers(-2**62, 2**62, size=(11,), dtype=np.int64),
        "counts": rng.integers(-2**31, 2**31 - 1, size=(3, 5), dtype=np.int32),
        "codes": rng.integers(-128, 127, size=(6,), dtype=np.int8),
        "pixels": rng.integers(0, 255, size=(17, 2), dtype=np.uint8),
        "mask": rng.integers(0, 2, size=(3, 4)).astype(np.bool_),
        "scalar": np.array(2.5, dtype=np.float64),
        "nothing": np.zeros((0, 3), dtype=np.float32),
    }


def st_name(arr):
    return {v: k for k, v in NUMPY_DTYPES.items()}[arr.dtype.type]


def written_by_python(tmp):
    values = numpy_values()
    ref_prefix = os.path.join(tmp, "pyref")
    write_reference(ref_prefix, [(k, st_name(v), v.shape, v.tobytes()) for k, v in values.items()])

    one = os.path.join(tmp, "from_numpy.safetensors")
    safetensors.numpy.save_file(values, one, metadata={"source": "numpy"})
    print(run([HELPER, "import", one, ref_prefix]).stdout.strip())

    # Two files and a Hugging Face index written by hand.
    names = list(values)
    parts = {"py-00001-of-00002.safetensors": names[:4], "py-00002-of-00002.safetensors": names[4:]}
    for fname, part in parts.items():
        safetensors.numpy.save_file({k: values[k] for k in part}, os.path.join(tmp, fname))
    hf_index = os.path.join(tmp, "py.safetensors.index.json")
    with open(hf_index, "w") as f:
        json.dump({"metadata": {"total_size": sum(v.nbytes for v in values.values())},
                   "weight_map": {k: fname for fname, part in parts.items() for k in part}}, f)
    print(run([HELPER, "import", hf_index, ref_prefix]).stdout.strip())

    # The comparison has teeth: one changed byte in the reference fails the import check.
    with open(ref_prefix + ".bin", "r+b") as f:
        f.seek(5)
        b = f.read(1)
        f.seek(5)
        f.write(bytes([b[0] ^ 1]))
    p = run([HELPER, "import", one, ref_prefix], want_rc=1)
    check("embed.weight" in p.stdout, f"the mismatch names the tensor:\n{p.stdout}")

    if torch is not None:
        # bfloat16 exists only on the PyTorch side.
        g = torch.Generator().manual_seed(5)
        tv = {"w.bf16": torch.randn(7, 6, generator=g).to(torch.bfloat16),
              "b.bf16": torch.randn(5, generator=g).to(torch.bfloat16),
              "w.f32": torch.randn(3, 4, generator=g)}
        tref = os.path.join(tmp, "torchref")
        write_reference(tref, [(k, {torch.bfloat16: "BF16", torch.float32: "F32"}[v.dtype], list(v.shape),
                                v.reshape(-1).view(torch.uint8).numpy().tobytes()) for k, v in tv.items()])
        path = os.path.join(tmp, "from_torch.safetensors")
        safetensors.torch.save_file(tv, path)
        print(run([HELPER, "import", path, tref]).stdout.strip())


def main():
    versions = f"numpy {np.__version__}, safetensors {safetensors.__version__}, " + (
        f"torch {torch.__version__}" if torch is not None else "no torch (its checks skipped)")
    print(f"python {sys.executable}: {versions}")
    tmp = tempfile.mkdtemp(prefix="dt_safetensors_py_")
    try:
        exported_by_dtensor(tmp)
        written_by_python(tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"ok: {checked['numpy']} tensors compared through NumPy, {checked['raw']} bf16 by their bytes, "
          f"{checked['torch']} through PyTorch")


if __name__ == "__main__":
    main()
