#!/usr/bin/env python3
"""Fails when the library or its tools read the environment outside core/config.cc, or name a DT_* variable that
core/config.h does not declare (Note [Configuration]: every variable is declared once).

Usage: check_config.py REPO_ROOT
"""
import os
import re
import sys

FOLDERS = ("core", "placement", "kernels", "collectives", "dtensor", "nn", "fsdp", "bindings", "tools")
SOURCE_EXT = (".h", ".hpp", ".cc", ".cpp", ".cu", ".cuh", ".c")
GETENV = re.compile(r"\bgetenv\s*\(")
NAME = re.compile(r'"(DT_[A-Z0-9_]+)[="]')
# Launcher-side names that dtrun sets or removes for its children without reading them.
LAUNCH_ONLY = set()


def main(root):
    header = open(os.path.join(root, "core", "config.h"), encoding="utf-8").read()
    declared = set(re.findall(r'X\(k\w+, "(DT_[A-Z0-9_]+)"', header))
    problems = []
    for folder in FOLDERS:
        for dirpath, _, files in os.walk(os.path.join(root, folder)):
            for name in files:
                if not name.endswith(SOURCE_EXT):
                    continue
                path = os.path.join(dirpath, name)
                rel = os.path.relpath(path, root)
                text = open(path, encoding="utf-8", errors="replace").read()
                for no, line in enumerate(text.splitlines(), 1):
                    if GETENV.search(line) and rel != os.path.join("core", "config.cc"):
                        problems.append(f"{rel}:{no}: reads the environment directly (use core/config.h)")
                    for var in NAME.findall(line):
                        if var not in declared and var not in LAUNCH_ONLY and rel != os.path.join("core", "config.h"):
                            problems.append(f"{rel}:{no}: {var} is not declared in core/config.h")
    for p in problems:
        print(p)
    print(f"{len(declared)} variables declared, {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "."))
