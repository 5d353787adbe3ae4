#!/usr/bin/env python3
"""The Python package's wheel (issue #38): built by meson-python, it carries libdtensor.so, dtrun and the compiled
fast paths inside dtensor/, and installs in seconds on another machine of the same platform.

Two depths:
- By default (meson test, suite 'python'; a few seconds, nothing compiled): the packaging metadata. The root
  pyproject.toml (backend mesonpy, the Meson options of the wheel, the build and install filters, the `torch` extra,
  the `dtrun` command), bindings/python/pyproject.toml forwarding to it, and the install plan of a scratch Meson
  configure with -Dpython_package=true: exactly the modules, libdtensor.so, dtrun and _speedups, all in
  site-packages/dtensor/ and tagged python-runtime; and, in the build folder running the tests (configured without
  the option), the library and dtrun in libdir and bindir as before.
- With --full (`./dev wheel`, or DT_WHEEL_FULL=1): `pip wheel ./bindings/python` in a fresh virtual environment
  (compiles the library: minutes; DT_WHEEL_BUILD_DIR=DIR keeps meson-python's build folder there for quicker
  rebuilds), the wheel's file list checked, the wheel installed into another fresh virtual environment (timed),
  `import dtensor` from /tmp, the installed `dtrun` running a 2-rank all-reduce, and `pip install --dry-run
  'WHEEL[torch]'` resolving the extra (not downloading it). Needs PyPI, or pip's cache, for meson-python, numpy and
  the extra's resolution.

Usage: test_wheel.py [--full] [--keep DIR]   (--keep: build and install under DIR and leave them there)
Environment (meson sets it): DT_SOURCE_ROOT (the repository), DT_BUILD_ROOT (the build folder running the tests),
MESON (the meson command to configure with; default: meson on PATH).
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.environ.get("DT_SOURCE_ROOT") or os.path.dirname(os.path.dirname(HERE))
PKG = os.path.join(ROOT, "bindings", "python")
SKIP = 77

# The Meson options every wheel is built with (pyproject.toml), and what it must carry besides the modules.
WHEEL_SETUP_ARGS = ["-Dpython_package=true", "-Dtests=false", "-Dcuda=disabled", "-Dwerror=false"]
NATIVE = ["dtensor/libdtensor.so", "dtensor/dtrun"]
SPEEDUPS = re.compile(r"^dtensor/_speedups\.[^/]*\.so$")

# A 2-rank all-reduce with the package's API: every rank contributes rank + 1 as a Partial(sum) block, and the
# redistribution to Replicate sums them (3 on both ranks).
ALL_REDUCE = """
import numpy as np, dtensor as dt
world = dt.init_process_group()
mesh = dt.DeviceMesh(world, "cpu", (world.size,), ("x",))
x = dt.DTensor.from_local(np.full(4, world.rank + 1.0, np.float32), mesh, [dt.Partial()], shape=(4,))
y = x.redistribute([dt.Replicate()]).to_local()
expected = world.size * (world.size + 1) / 2
assert (y == expected).all(), (world.rank, y)
print(f"rank {world.rank}/{world.size}: all_reduce ok {y.tolist()}", flush=True)
"""


class Skip(Exception):
    pass


def fail(msg):
    raise AssertionError(msg)


def package_modules():
    """The files the wheel must hold: every .py under bindings/python/dtensor and the libtorch bridge's source (what
    package_modules.py lists)."""
    r = subprocess.run([sys.executable, os.path.join(PKG, "package_modules.py")], capture_output=True, text=True,
                       check=True)
    return sorted(r.stdout.split())


def meson_version():
    with open(os.path.join(ROOT, "meson.build"), encoding="utf-8") as f:
        return re.search(r"^project\([^)]*?\bversion:\s*'([^']+)'", f.read(), re.S | re.M).group(1)


# ---- metadata (fast) ------------------------------------------------------------------------------------------------


def check_pyprojects():
    try:
        import tomllib
    except ImportError:
        raise Skip(f"{sys.executable} has no tomllib (Python 3.11+) to read pyproject.toml")
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        root = tomllib.load(f)
    with open(os.path.join(PKG, "pyproject.toml"), "rb") as f:
        shim = tomllib.load(f)
    bs = root["build-system"]
    assert bs["build-backend"] == "mesonpy", bs
    assert any(r.startswith("meson-python") for r in bs["requires"]), bs
    proj = root["project"]
    assert proj["name"] == "dtensor" and "version" in proj["dynamic"], proj
    assert os.path.exists(os.path.join(ROOT, proj["readme"])), proj["readme"]
    assert any(d.startswith("numpy") for d in proj["dependencies"]), proj["dependencies"]
    assert any(d.startswith("torch") for d in proj["optional-dependencies"]["torch"]), proj["optional-dependencies"]
    assert proj["scripts"]["dtrun"] == "dtensor._launcher:main", proj["scripts"]
    args = root["tool"]["meson-python"]["args"]
    for a in WHEEL_SETUP_ARGS:
        assert a in args["setup"], f"pyproject.toml: setup args {args['setup']} lack {a}"
    assert args["compile"] == ["python-package"], args["compile"]
    assert args["install"] == ["--tags=python-runtime"], args["install"]
    # bindings/python only forwards: the same requirements, its in-tree backend, no metadata of its own to drift.
    sbs = shim["build-system"]
    assert sbs["build-backend"] == "_build_backend" and sbs["backend-path"] == ["."], sbs
    assert sbs["requires"] == bs["requires"], (sbs["requires"], bs["requires"])
    assert "project" not in shim, "bindings/python/pyproject.toml: the metadata belongs to the root pyproject.toml"
    with open(os.path.join(PKG, "_build_backend.py"), encoding="utf-8") as f:
        backend = f.read()
    for hook in ("build_wheel", "build_sdist", "get_requires_for_build_wheel", "get_requires_for_build_sdist"):
        assert re.search(rf"^{hook} = _at_root\(mesonpy\.{hook}\)$", backend, re.M), f"_build_backend.py: {hook}"
    assert not os.path.exists(os.path.join(PKG, "setup.py")), "bindings/python/setup.py: the wheel is meson-python's"
    print("pyproject.toml and bindings/python/pyproject.toml: ok")


def install_plan(build):
    with open(os.path.join(build, "meson-info", "intro-install_plan.json"), encoding="utf-8") as f:
        plan = json.load(f)
    return [(src, d["destination"], d["tag"]) for group in plan.values() for src, d in group.items()]


def check_install_plan():
    meson = os.environ.get("MESON") or shutil.which("meson")
    if not meson:
        raise Skip("meson is not on PATH")
    with tempfile.TemporaryDirectory(prefix="dt-wheel-plan-") as build:
        cmd = [*meson.split(), "setup", build, ROOT, "--buildtype=release", *WHEEL_SETUP_ARGS]
        r = subprocess.run(cmd, capture_output=True, text=True)
        assert r.returncode == 0, f"{' '.join(cmd)}:\n{r.stdout}{r.stderr}"
        entries = install_plan(build)
        with open(os.path.join(build, "build.ninja"), encoding="utf-8") as f:
            alias = re.search(r"^build python-package: phony (.*)$", f.read(), re.M)
    ours = {}
    for src, dst, tag in entries:
        if tag != "python-runtime":
            continue
        assert dst.startswith("{py_platlib}/dtensor/"), f"{src} goes to {dst}, not the package (platlib/dtensor/)"
        ours[dst[len("{py_platlib}/"):]] = src
    modules = package_modules()
    want = set(NATIVE) | set(modules)
    got = set(ours)
    speedups = [p for p in got if SPEEDUPS.match(p)]
    assert len(speedups) <= 1, speedups
    missing, extra = want - got, got - want - set(speedups)
    assert not missing and not extra, f"install plan (tag python-runtime): missing {sorted(missing)}, " \
                                      f"unexpected {sorted(extra)}"
    if not speedups:
        print("note: no _speedups in the install plan (no Python headers for the python meson runs under)")
    # The wheel build compiles only the alias target (pyproject.toml: compile = ['python-package']): the three.
    assert alias, "build.ninja has no python-package target"
    for out in ["libdtensor.so", "tools/dtrun"] + (["_speedups"] if speedups else []):
        assert out in alias.group(1), f"the python-package target lacks {out}: {alias.group(1)}"
    print(f"install plan with -Dpython_package=true: ok ({len(modules)} modules, "
          f"{', '.join(sorted(NATIVE + speedups))} in site-packages/dtensor/)")


def check_default_install(build):
    """The C++ install of the build folder running the tests (no python_package): library and tools as before."""
    if not build or not os.path.exists(os.path.join(build, "meson-info", "intro-install_plan.json")):
        print("note: DT_BUILD_ROOT unset: the default install plan is not checked")
        return
    plan = {dst: tag for _, dst, tag in install_plan(build)}
    assert plan.get("{libdir_shared}/libdtensor.so", plan.get("{libdir}/libdtensor.so")) == "runtime", \
        sorted(k for k in plan if "libdtensor" in k)
    assert plan.get("{bindir}/dtrun") == "runtime", sorted(k for k in plan if "dtrun" in k)
    assert not [d for d, t in plan.items() if t == "python-runtime" or "py_platlib" in d], "python files installed"
    print("default install plan (libdir, bindir, headers; no Python package): ok")


# ---- wheel (--full) -------------------------------------------------------------------------------------------------


def run(cmd, **kw):
    print("+ " + " ".join(cmd), flush=True)
    t = time.monotonic()
    r = subprocess.run(cmd, text=True, capture_output=True, **kw)
    took = time.monotonic() - t
    if r.returncode != 0:
        fail(f"{' '.join(cmd)} exited with {r.returncode} after {took:.0f} s:\n{r.stdout[-6000:]}{r.stderr[-6000:]}")
    return r.stdout + r.stderr, took


def venv(path):
    run([sys.executable, "-m", "venv", path])
    return os.path.join(path, "bin", "python")


def check_wheel_contents(wheel):
    with zipfile.ZipFile(wheel) as z:
        infos = {i.filename: i for i in z.infolist()}
        names = sorted(infos)
        dist = [n for n in names if n.endswith(".dist-info/METADATA")]
        assert len(dist) == 1, names
        meta = z.read(dist[0]).decode()
        entry_points = z.read(dist[0].replace("METADATA", "entry_points.txt")).decode()
    print("wheel contents:")
    for n in names:
        print(f"  {infos[n].file_size:>12}  {n}")
    for n in NATIVE + package_modules():
        assert n in infos, f"the wheel lacks {n}"
    speedups = [n for n in names if SPEEDUPS.match(n)]
    assert len(speedups) == 1, f"the wheel has no compiled fast paths (dtensor/_speedups.*.so): {names}"
    assert (infos["dtensor/dtrun"].external_attr >> 16) & 0o111, "dtensor/dtrun is not executable in the wheel"
    stray = [n for n in names if not (n.startswith("dtensor/") or ".dist-info/" in n)]
    assert not stray, f"files outside the package: {stray}"
    assert f"Version: {meson_version()}" in meta, meta[:400]
    assert re.search(r"^Requires-Dist: torch.*extra == ['\"]torch['\"]", meta, re.M), meta
    assert re.search(r"^dtrun = dtensor\._launcher:main$", entry_points, re.M), entry_points
    return speedups[0]


def full(keep):
    work = keep or tempfile.mkdtemp(prefix="dt-wheel-")
    os.makedirs(work, exist_ok=True)
    try:
        build_py = venv(os.path.join(work, "build-venv"))
        wheels = os.path.join(work, "wheels")
        cmd = [build_py, "-m", "pip", "wheel", "--no-deps", PKG, "-w", wheels]
        if os.environ.get("DT_WHEEL_BUILD_DIR"):
            # (the long form: Debian 12's pip, 23.0, has no -C)
            cmd.append("--config-settings=build-dir=" + os.path.abspath(os.environ["DT_WHEEL_BUILD_DIR"]))
        _, build_s = run(cmd)
        wheel = [os.path.join(wheels, w) for w in os.listdir(wheels) if w.startswith("dtensor-")]
        assert len(wheel) == 1, os.listdir(wheels)
        wheel = wheel[0]
        check_wheel_contents(wheel)
        # Another fresh environment, away from the repository: what a user gets from the wheel alone.
        inst = os.path.join(work, "install-venv")
        py = venv(inst)
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "DTENSOR_LIBRARY", "DTENSOR_SPEEDUPS")
               and not k.startswith("DT_")}
        _, install_s = run([py, "-m", "pip", "install", wheel], cwd=tempfile.gettempdir(), env=env)
        out, _ = run([py, "-c", "import dtensor, os; print(dtensor.__version__, os.path.dirname(dtensor.__file__), "
                      "dtensor._lib.speedups is not None)"], cwd=tempfile.gettempdir(), env=env)
        version, where, fast = out.split()
        assert version == meson_version(), out
        assert where.startswith(inst), f"dtensor imported from {where}, not the installed wheel"
        assert fast == "True", "the installed package did not load its compiled fast paths"
        out, _ = run([os.path.join(inst, "bin", "dtrun"), "--nproc-per-node", "2", "--timeout", "60", py, "-c",
                      ALL_REDUCE], cwd=tempfile.gettempdir(), env=env)
        assert out.count("all_reduce ok [3.0, 3.0, 3.0, 3.0]") == 2, out
        print(out.strip())
        out, _ = run([py, "-m", "pip", "install", "--dry-run", wheel + "[torch]"], cwd=tempfile.gettempdir(), env=env)
        assert re.search(r"Would install .*\btorch-", out), out
        print(f"wheel: {os.path.basename(wheel)}, {os.path.getsize(wheel) / 2**20:.1f} MiB; built in {build_s:.0f} s, "
              f"installed in {install_s:.1f} s; import, dtrun with 2 ranks and the [torch] extra: ok")
    finally:
        if not keep:
            shutil.rmtree(work, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--full", action="store_true", default=bool(os.environ.get("DT_WHEEL_FULL")))
    ap.add_argument("--keep", metavar="DIR")
    a = ap.parse_args()
    try:
        check_pyprojects()
        check_install_plan()
        check_default_install(os.environ.get("DT_BUILD_ROOT"))
        if a.full:
            full(a.keep)
        else:
            print("the wheel itself is built by ./dev wheel (or DT_WHEEL_FULL=1): minutes, so not here")
    except Skip as e:
        print(f"SKIP: {e}")
        return SKIP
    print("wheel packaging: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
