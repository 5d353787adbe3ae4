#!/usr/bin/env python3
"""The public headers: the two umbrellas (api/dtensor/dt.h for C++, api/dtensor/c_api.h for C) and every header of
the tree they include, transitively, as the compiler finds them (-MM: the includes of ours, not the system's).
meson.build installs exactly these; tests/install_test.py checks the installed tree.

Usage: public_headers.py SOURCE_ROOT COMPILER [ARG...]
Prints one path per line, relative to SOURCE_ROOT, sorted. Headers the tree does not hold are left out: the
generated <dtensor/version.h> (-MG lets the compiler go on without it; Meson installs it itself).
"""
import os
import subprocess
import sys

UMBRELLAS = ("api/dtensor/dt.h", "api/dtensor/c_api.h")


def public_headers(root, compiler):
    cmd = [*compiler, "-std=c++20", "-x", "c++", "-MM", "-MG", f"-I{root}", f"-I{os.path.join(root, 'api')}"]
    out = subprocess.run(cmd + [os.path.join(root, u) for u in UMBRELLAS], check=True, capture_output=True,
                         text=True, cwd=root).stdout
    found = set()
    for word in out.replace("\\\n", " ").split():
        if word.endswith(":"):  # a rule's target (dt.o:)
            continue
        path = os.path.relpath(os.path.normpath(os.path.join(root, word)), root)
        if not path.startswith("..") and os.path.isfile(os.path.join(root, path)):
            found.add(path)
    missing = [u for u in UMBRELLAS if u not in found]
    if missing:
        sys.exit(f"public_headers.py: the compiler listed no {', '.join(missing)}: {' '.join(cmd)}")
    return sorted(found)


def main(argv):
    if len(argv) < 3:
        sys.exit(__doc__)
    root = os.path.abspath(argv[1])
    # ccache adds nothing to a dependency listing.
    compiler = [a for a in argv[2:] if os.path.basename(a) != "ccache"]
    print("\n".join(public_headers(root, compiler)))


if __name__ == "__main__":
    main(sys.argv)
