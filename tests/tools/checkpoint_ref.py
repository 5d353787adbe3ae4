"""What the checkpoint tests share (standard library only): the reference that checkpoint_helper writes from the full
tensors, an independent reader of the safetensors format, and the bytes of a box of a row-major tensor.
"""
import json
import struct

# safetensors dtype name -> (dtensor name, bytes per element)
DTYPES = {
    "F32": ("f32", 4), "F64": ("f64", 8), "F16": ("f16", 2), "BF16": ("bf16", 2), "I64": ("i64", 8),
    "I32": ("i32", 4), "I8": ("i8", 1), "U8": ("u8", 1), "BOOL": ("bool", 1),
}


def numel(shape):
    n = 1
    for s in shape:
        n *= s
    return n


def read_reference(prefix):
    """(tensors, metadata): tensors in order, each a dict with name, dtype (safetensors name), shape, spec and data
    (its row-major bytes)."""
    with open(prefix + ".json") as f:
        ref = json.load(f)
    with open(prefix + ".bin", "rb") as f:
        blob = f.read()
    tensors = []
    for t in ref["tensors"]:
        t = dict(t)
        t["data"] = blob[t["offset"]:t["offset"] + t["nbytes"]]
        assert len(t["data"]) == numel(t["shape"]) * DTYPES[t["dtype"]][1], t["name"]
        tensors.append(t)
    return tensors, ref.get("metadata", {})


def write_reference(prefix, tensors, metadata=None):
    """The same files from Python: tensors is a list of (name, dtype, shape, data bytes)."""
    entries, blob = [], b""
    for name, dtype, shape, data in tensors:
        entries.append({"name": name, "dtype": dtype, "shape": list(shape), "spec": "", "offset": len(blob),
                        "nbytes": len(data)})
        blob += data
    with open(prefix + ".json", "w") as f:
        json.dump({"tensors": entries, "metadata": metadata or {}}, f)
    with open(prefix + ".bin", "wb") as f:
        f.write(blob)


def read_safetensors(path):
    """(entries, metadata): entries by name in file order, each {dtype, shape, data}. Checks the layout the format
    requires: 8-byte length, a JSON header, offsets back to back from 0 to the end of the file."""
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    metadata = header.pop("__metadata__", {})
    data = raw[8 + n:]
    entries, ends = {}, []
    for name, e in sorted(header.items(), key=lambda kv: kv[1]["data_offsets"][0]):
        b, end = e["data_offsets"]
        assert end - b == numel(e["shape"]) * DTYPES[e["dtype"]][1], f"{path}: {name} has the wrong byte count"
        ends.append((b, end))
        entries[name] = {"dtype": e["dtype"], "shape": e["shape"], "data": data[b:end]}
    pos = 0
    for b, end in ends:
        assert b == pos, f"{path}: a gap or an overlap at byte {b} of the data"
        pos = end
    assert pos == len(data), f"{path}: {len(data) - pos} bytes after the last tensor"
    return entries, metadata


def box_bytes(data, shape, elem, offset, box):
    """The row-major bytes of the box (offset, box shape) of a row-major tensor of `shape`."""
    if numel(box) == 0:
        return b""
    if not shape:
        return data
    out = []
    inner = numel(shape[1:]) * elem
    for i in range(offset[0], offset[0] + box[0]):
        out.append(box_bytes(data[i * inner:(i + 1) * inner], shape[1:], elem, offset[1:], box[1:]))
    return b"".join(out)
