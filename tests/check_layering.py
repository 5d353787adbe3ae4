#!/usr/bin/env python3
"""Fails when a file includes a folder its layer may not use (the table in DESIGN.md, section 2).

Usage: check_layering.py REPO_ROOT
Looks at every #include "folder/..." in the layer folders and checks the folder against the allowed list.
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
    "tools": {"core", "placement", "kernels", "collectives", "dtensor", "nn", "fsdp", "bindings"},
    # The C++ umbrella (api/dtensor/dt.h, installed as <dtensor/dt.h>): the top layer, it may include every layer.
    "api": {"core", "placement", "kernels", "collectives", "dtensor", "nn", "fsdp"},
}
# The umbrella must not pull in a backend's external headers (users need not have UCX, NCCL or CUDA headers).
UMBRELLA = "api/dtensor/dt.h"
BACKEND_HEADERS = re.compile(r'^\s*#\s*include\s*<(ucp|ucs|uct|nccl|cuda|cublas|thrust|cub)\b[^>]*>', re.M)
ANY_INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"', re.M)
# The FSDP engine must not depend on nn/ (DESIGN.md): only fully_shard wires it into modules.
FSDP_ENGINE_EXCEPTIONS = ("fsdp/fully_shard",)
LAYERS = set(ALLOWED)
INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"/]+)/[^"]*"', re.M)
SOURCE_EXT = (".h", ".hpp", ".cc", ".cpp", ".cu", ".cuh", ".c")


def violations(root):
    out = []
    for layer, allowed in ALLOWED.items():
        top = os.path.join(root, layer)
        for dirpath, _, files in os.walk(top):
            for name in files:
                if not name.endswith(SOURCE_EXT):
                    continue
                path = os.path.join(dirpath, name)
                rel = os.path.relpath(path, root)
                with open(path, encoding="utf-8", errors="replace") as f:
                    text = f.read()
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


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.getcwd()
    bad = violations(root) + umbrella_violations(root)
    for v in bad:
        print(v)
    print(f"layering: {len(bad)} violation(s)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
