"""Builds libdtensor.so and dtrun with Meson from the repository this folder is in, and puts them in the package.

    pip install ./bindings/python

Environment: DTENSOR_MESON_ARGS replaces the configure options (default: -Dtests=false -Dcuda=disabled
--buildtype=release); DTENSOR_BUILD_DIR reuses (or makes) that Meson build folder instead of a temporary one;
DTENSOR_BUILD_JOBS caps ninja's parallel jobs (default: ninja's, all cores).
Needs meson, ninja and the C++ dependencies the repository's ./dev deps installs.
"""
import os
import re
import shlex
import shutil
import subprocess
import tempfile

from setuptools import Extension, setup
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
ARTIFACTS = {"libdtensor.so": "libdtensor.so", os.path.join("tools", "dtrun"): "dtrun"}


def project_version():
    """The version in the repository's meson.build (the one place it is written; dt_version_string() returns it)."""
    with open(os.path.join(ROOT, "meson.build"), encoding="utf-8") as f:
        m = re.search(r"^project\([^)]*?\bversion:\s*'([^']+)'", f.read(), re.S | re.M)
    if not m:
        raise RuntimeError(f"dtensor: no project version in {os.path.join(ROOT, 'meson.build')}")
    return m.group(1)


def build_with_meson():
    if not os.path.exists(os.path.join(ROOT, "meson.build")):
        raise RuntimeError(f"dtensor: no meson.build at {ROOT}: install from the repository (pip install "
                           f"./bindings/python), not from a copy of this folder alone")
    for tool in ("meson", "ninja"):
        if shutil.which(tool) is None:
            raise RuntimeError(f"dtensor: `{tool}` is not on PATH; the repository's ./dev deps installs it")
    build = os.environ.get("DTENSOR_BUILD_DIR") or tempfile.mkdtemp(prefix="dtensor-meson-")
    # No -Werror: an install must not fail on a newer compiler's warnings (GCC 12 -O3 gives a false -Wrestrict).
    default = "-Dtests=false -Dcuda=disabled --buildtype=release -Dwerror=false"
    args = shlex.split(os.environ.get("DTENSOR_MESON_ARGS", default))
    if not os.path.exists(os.path.join(build, "build.ninja")):
        subprocess.check_call(["meson", "setup", build, ROOT, *args])
    jobs = os.environ.get("DTENSOR_BUILD_JOBS")
    subprocess.check_call(["ninja", "-C", build, *([f"-j{int(jobs)}"] if jobs else []), *ARTIFACTS.keys()])
    return build


class BuildPyWithMeson(build_py):
    def run(self):
        super().run()
        build = build_with_meson()
        dest = os.path.join(self.build_lib, "dtensor")
        os.makedirs(dest, exist_ok=True)
        for src, name in ARTIFACTS.items():
            shutil.copy2(os.path.join(build, src), os.path.join(dest, name))
        if not os.environ.get("DTENSOR_BUILD_DIR"):
            shutil.rmtree(build, ignore_errors=True)


class BinaryDistribution(Distribution):
    """The wheel holds a native library: tag it for this platform, not py3-none-any."""

    def has_ext_modules(self):
        return True


# The compiled fast paths (dtensor/_speedups.c: DTensor's base type, whose redistribute and close run no ctypes and no
# Python frame). Optional: without Python's headers the build goes on and the package runs on ctypes alone.
SPEEDUPS = Extension("dtensor._speedups", sources=["dtensor/_speedups.c"], optional=True)

setup(version=project_version(), cmdclass={"build_py": BuildPyWithMeson}, distclass=BinaryDistribution, ext_modules=[SPEEDUPS])
