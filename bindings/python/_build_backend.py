"""The build backend of bindings/python (pyproject.toml here): meson-python's, run on the repository root.

meson-python builds the Meson project in the current folder, reading pyproject.toml there, and the project is the
repository (two folders up): its pyproject.toml holds the package's metadata and build options. pip calls these hooks
from this folder, so each one runs from the root; the folders pip names are made absolute first. A relative
`-Cbuild-dir=...` is therefore relative to the repository root (`-Cbuild-dir=build-wheel` keeps the Meson build
folder between wheel builds, so that a rebuild compiles only what changed).
"""
import functools
import os

import mesonpy

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _at_root(hook):
    @functools.wraps(hook)
    def run(*args, **kwargs):
        if not (os.path.exists(os.path.join(_ROOT, "meson.build")) and
                os.path.exists(os.path.join(_ROOT, "pyproject.toml"))):
            raise RuntimeError(f"dtensor: {_ROOT} is not the dtensor repository (no meson.build and pyproject.toml): "
                               "build from the repository (pip install ./bindings/python, with a pip that builds in "
                               "place, 21.3 or newer), or from the sdist")
        args = [os.path.abspath(a) if isinstance(a, str) else a for a in args]  # wheel, sdist or metadata folder
        kwargs = {k: os.path.abspath(v) if isinstance(v, str) else v for k, v in kwargs.items()}
        here = os.getcwd()
        os.chdir(_ROOT)
        try:
            return hook(*args, **kwargs)
        finally:
            os.chdir(here)
    return run


get_requires_for_build_wheel = _at_root(mesonpy.get_requires_for_build_wheel)
get_requires_for_build_sdist = _at_root(mesonpy.get_requires_for_build_sdist)
build_wheel = _at_root(mesonpy.build_wheel)
build_sdist = _at_root(mesonpy.build_sdist)
# No editable install from here: meson-python's keeps a build folder (build/<abi> by default, in the repository's
# build/) and rebuilds on import; `PYTHONPATH=bindings/python DTENSOR_LIBRARY=build/libdtensor.so` serves development.
