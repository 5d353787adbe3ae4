"""The Python tests run under the build folder's py-venv (made by `./dev deps` / `./dev test`; meson passes its
folder as DT_PY_VENV): reexec_in_venv() re-executes the calling script there, once; skip_unless_importable() ends a
test as skipped (exit 77) when the venv lacks a module it needs."""
import os
import sys


def reexec_in_venv():
    venv = os.environ.get("DT_PY_VENV", "")
    python = os.path.join(venv, "bin", "python3")
    if venv and os.path.exists(python) and os.path.realpath(sys.prefix) != os.path.realpath(venv):
        try:
            os.execv(python, [python, os.path.abspath(sys.argv[0]), *sys.argv[1:]])
        except OSError as e:  # a broken venv: go on here, the caller's imports decide
            print(f"note: cannot run {python} ({e}); using {sys.executable}")


def skip_unless_importable(*modules):
    """Exits 77 (skipped), naming the first of `modules` this interpreter cannot import."""
    import importlib
    for name in modules:
        try:
            importlib.import_module(name)
        except ImportError as e:
            print(f"SKIP: {e.name or name} is not importable by {sys.executable}; `./dev deps` installs "
                  f"{', '.join(modules)} into the build folder's py-venv (it needs PyPI)")
            sys.exit(77)
