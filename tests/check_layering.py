#!/usr/bin/env python3
"""Fails when a file includes a folder its layer may not use (the layer table of the architecture docs).

Usage: check_layering.py REPO_ROOT
Looks at every #include "folder/..." in the layer folders and checks the folder against the allowed list, then the
sub-layer rules (SUBLAYER_RULES: the collectives root includes no backend, dtensor/ sees only the communicator
interface), then the Meson dependency lists: a layer's meson.build files may name only the *_dep of the layers it
may use.
"""
import os
import re
import sys

# layer -> folders of ours it may include (besides itself)
ALLOWED = {
    "core": set(),
    "placement": {"core"},
    "kernels": {"core"},
    "collectives": {"core", "kernels"},
    "dtensor": {"core", "placement", "kernels", "collectives"},
    "nn": {"core", "placement", "kernels", "collectives", "dtensor"},
    "fsdp": {"core", "placement", "kernels", "collectives", "dtensor", "nn"},
    "bindings": {"core", "placement", "kernels", "collectives", "dtensor", "nn", "fsdp"},
    # Pipeline parallelism: stages, schedules (the action IR and its validator), the interpreter; above fsdp/.
    "pipeline": {"core", "placement", "kernels", "collectives", "dtensor", "nn", "fsdp"},
    # What a trainer is made of; above pipeline/, beside bindings/.
    "train": {"core", "placement", "kernels", "collectives", "dtensor", "nn", "fsdp", "pipeline"},
    "tools": {"core", "placement", "kernels", "collectives", "dtensor", "nn", "fsdp", "pipeline", "bindings", "train"},
    # The C++ umbrella (api/dtensor/dt.h, installed as <dtensor/dt.h>): the top layer, it may include every layer.
    "api": {"core", "placement", "kernels", "collectives", "dtensor", "nn", "fsdp", "pipeline", "train"},
}
# The umbrella must not pull in a backend's external headers (users need not have UCX, NCCL or CUDA headers).
UMBRELLA = "api/dtensor/dt.h"
BACKEND_HEADERS = re.compile(r'^\s*#\s*include\s*<(ucp|ucs|uct|nccl|cuda|cublas|thrust|cub)\b[^>]*>', re.M)
ANY_INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"', re.M)
# The FSDP engine must not depend on nn/ (DESIGN.md): only fully_shard wires it into modules.
FSDP_ENGINE_EXCEPTIONS = ("fsdp/fully_shard",)
LAYERS = set(ALLOWED)
INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"/]+)/[^"]*"', re.M)
FULL_INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"', re.M)

# Rules inside and across layers: (which files, a test on the included path, why).
# - The collectives root (collectives/*.{h,cc}: the Communicator, Work, bootstrap, process group, backend registry)
#   includes no backend: the backends register themselves (collectives/backend_registry.h).
# - The backend-neutral entry points do not include the store either: they hand it around as a Store*.
# - A backend does not include another backend.
# - dtensor/ sees the collectives only through the communicator interface (and the neutral entry point, whose
#   default_cuda_device picks a CUDA mesh's GPU).
COLLECTIVES_BACKENDS = ("collectives/ucx/", "collectives/nccl/", "collectives/thread/")
NEUTRAL_ENTRY_POINTS = ("collectives/process_group.h", "collectives/process_group.cc", "collectives/bootstrap.h",
                        "collectives/backend_registry.h", "collectives/backend_registry.cc")
DTENSOR_COLLECTIVES = (
    "collectives/communicator.h",
    "collectives/work.h",
    "collectives/exchange.h",
    "collectives/process_group.h",
)


def _in_root(rel):
    return rel.startswith("collectives/") and rel.count("/") == 1


def _backend_of(rel):
    for b in COLLECTIVES_BACKENDS:
        if rel.startswith(b):
            return b
    return None


# Tool headers that include nothing of ours: dttrain (public API only) may use them.
TOOLS_STANDALONE = ("tools/progress.h",)

SUBLAYER_RULES = [
    (_in_root, lambda inc: inc.startswith(COLLECTIVES_BACKENDS),
     "the collectives root includes no backend (register it in collectives/backend_registry.h instead)"),
    (lambda rel: rel in NEUTRAL_ENTRY_POINTS, lambda inc: inc.startswith("collectives/store/"),
     "the backend-neutral entry points include no store header (forward-declare dt::Store)"),
    (lambda rel: _backend_of(rel) is not None,
     lambda inc: inc.startswith(COLLECTIVES_BACKENDS),  # filtered to other backends below
     "a collectives backend includes no other backend"),
    (lambda rel: rel.startswith("nn/") and not rel.startswith("nn/models/"),
     lambda inc: inc.startswith("nn/models/"),
     "nn/models/ (model families) builds on nn/; the rest of nn/ does not include it"),
    (lambda rel: rel == "tools/dttrain.cc", lambda inc: inc not in TOOLS_STANDALONE,
     "dttrain builds on the public C++ API only: #include <dtensor/dt.h> (and the tools' standard-library-only "
     "helpers: " + ", ".join(TOOLS_STANDALONE) + "), and add what it lacks to the API"),
    (lambda rel: rel in TOOLS_STANDALONE, lambda inc: True,
     "the tools' standalone helpers include standard headers only"),
    (lambda rel: rel == "core/trace.h", lambda inc: True,
     "core/trace.h, which every layer includes, includes standard headers only (the recorder's floor)"),
    (lambda rel: rel.startswith("dtensor/"),
     lambda inc: inc.startswith("collectives/") and inc not in DTENSOR_COLLECTIVES,
     "dtensor/ sees the collectives only through " + ", ".join(DTENSOR_COLLECTIVES)),
]

MESON_DEP = re.compile(r"\b([a-z]+?)(?:_layer)?_dep\b")
SOURCE_EXT = (".h", ".hpp", ".cc", ".cpp", ".cu", ".cuh", ".c")


def violations(root):
    out = []
    for layer, allowed in ALLOWED.items():
        for rel, text in source_files(root, layer):
            for m in INCLUDE.finditer(text):
                folder = m.group(1)
                if folder not in LAYERS or folder == layer:
                    continue
                ok = folder in allowed
                if layer == "fsdp" and folder == "nn" and not rel.startswith(FSDP_ENGINE_EXCEPTIONS):
                    ok = False
                if not ok:
                    line = text.count("\n", 0, m.start()) + 1
                    out.append(f"{rel}:{line}: layer '{layer}' may not include '{folder}/' "
                               f"(allowed: {', '.join(sorted(allowed)) or 'nothing of ours'})")
            out += sublayer_violations(rel, text)
    return out


def source_files(root, top):
    """(path relative to root, text) of every C/C++/CUDA source below root/top."""
    for dirpath, _, files in os.walk(os.path.join(root, top)):
        for name in files:
            if name.endswith(SOURCE_EXT):
                path = os.path.join(dirpath, name)
                with open(path, encoding="utf-8", errors="replace") as f:
                    yield os.path.relpath(path, root), f.read()


def sublayer_violations(rel, text):
    out = []
    for applies, forbidden, why in SUBLAYER_RULES:
        if not applies(rel):
            continue
        for m in FULL_INCLUDE.finditer(text):
            inc = m.group(1)
            if not forbidden(inc):
                continue
            own = _backend_of(rel)
            if own is not None and why.startswith("a collectives backend") and inc.startswith(own):
                continue
            line = text.count("\n", 0, m.start()) + 1
            out.append(f"{rel}:{line}: includes '{inc}': {why}")
    return out


def meson_violations(root):
    """Each layer's meson.build files (the folder and its subfolders) name only the deps of layers it may use."""
    out = []
    for layer, allowed in ALLOWED.items():
        top = os.path.join(root, layer)
        for dirpath, _, files in os.walk(top):
            if "meson.build" not in files:
                continue
            path = os.path.join(dirpath, "meson.build")
            rel = os.path.relpath(path, root)
            with open(path, encoding="utf-8", errors="replace") as f:
                lines = f.read().split("\n")
            for no, line in enumerate(lines, 1):
                code = line.split("#", 1)[0]
                for m in MESON_DEP.finditer(code):
                    dep_layer = m.group(1)
                    if dep_layer not in LAYERS or dep_layer == layer or dep_layer in allowed:
                        continue
                    out.append(f"{rel}:{no}: layer '{layer}' depends on '{m.group(0)}' "
                               f"(allowed: {', '.join(sorted(allowed)) or 'nothing of ours'})")
    return out


def umbrella_violations(root):
    """Walks the repository headers the umbrella reaches and reports any that includes a backend's headers."""
    out, seen, todo = [], set(), [UMBRELLA]
    while todo:
        rel = todo.pop()
        path = os.path.join(root, rel)
        if rel in seen or not os.path.exists(path):
            continue
        seen.add(rel)
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read()
        for m in BACKEND_HEADERS.finditer(text):
            out.append(f"{rel}: reached from {UMBRELLA}, includes the backend header <{m.group(1)}...>")
        todo.extend(ANY_INCLUDE.findall(text))
    return out


# Types private to a floor: named only inside it. nn's VariableImpl (the state behind a Variable) is written through
# Variable's methods everywhere else (deliver_grad, set_grad_sink, ...), so that nn alone decides how a gradient
# is delivered.
PRIVATE_NAMES = [(re.compile(r"\bVariableImpl\b|nn/variable_impl\.h"), "nn/", "nn's VariableImpl (nn/variable_impl.h)")]
PRIVATE_SCAN = ("core", "placement", "kernels", "collectives", "dtensor", "nn", "fsdp", "pipeline", "bindings", "train",
                "tools", "api",
                "tests", "bench", "examples")


def private_violations(root):
    """Files outside a floor that name what is private to it."""
    out = []
    for top in PRIVATE_SCAN:
        for rel, text in source_files(root, top):
            for pattern, owner, what in PRIVATE_NAMES:
                if rel.startswith(owner):
                    continue
                for m in pattern.finditer(text):
                    line = text.count("\n", 0, m.start()) + 1
                    out.append(f"{rel}:{line}: names {what}, private to {owner}; use the public API")
    return out


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.getcwd()
    bad = violations(root) + meson_violations(root) + umbrella_violations(root) + private_violations(root)
    for v in bad:
        print(v)
    print(f"layering: {len(bad)} violation(s)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
