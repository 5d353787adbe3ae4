#!/usr/bin/env python3
"""Prints the dtensor package's modules, one per line, relative to this folder (dtensor/__init__.py, ...): every .py
file under dtensor/, subpackages included, in a stable order, and the libtorch bridge's source, which dtensor.torch
compiles on the user's machine (Note [The libtorch bridge] in dtensor/torch/_bridge.py). bindings/python/meson.build
installs them (read at configure time, as tools/public_headers.py is: a new module needs a reconfigure, which a wheel
build always does)."""
import os

HERE = os.path.dirname(os.path.abspath(__file__))
BRIDGE_SOURCES = ("_torch_bridge.cpp", "_torch_bridge.h")


def modules():
    out = []
    for dirpath, dirnames, filenames in os.walk(os.path.join(HERE, "dtensor")):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__" and not d.startswith("."))
        out += [os.path.relpath(os.path.join(dirpath, f), HERE) for f in sorted(filenames)
                if f.endswith(".py") or f in BRIDGE_SOURCES]
    return out


if __name__ == "__main__":
    print("\n".join(modules()))
