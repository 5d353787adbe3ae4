"""`dtrun` for a pip-installed package: runs the launcher binary installed inside the package."""
import os
import sys


def main():
    exe = os.path.join(os.path.dirname(os.path.abspath(__file__)), "dtrun")
    if not os.path.exists(exe):
        sys.exit("dtrun: the launcher is not installed inside the package (" + exe + "); use the build tree's "
                 "tools/dtrun")
    os.execv(exe, [exe, *sys.argv[1:]])


if __name__ == "__main__":
    main()
