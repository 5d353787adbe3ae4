#!/usr/bin/env python3
"""The installed tree holds the public headers and nothing else of the sources, and a program builds against it.

Installs the build into a temporary DESTDIR (meson install --no-rebuild), then checks that:
- no source file (.c, .cc, .cpp, .cu, .cuh) and no meson.build is installed;
- the headers under include/dtensor/ are exactly the public ones: the umbrellas and what they include as the
  compiler finds it now (tools/public_headers.py, run again here: a header that started to include a new one shows
  up as missing until a reconfigure), plus the generated dtensor/version.h;
- through the installed dtensor.pc alone, the README's example (<dtensor/dt.h>) and a C99 program (<dtensor/c_api.h>)
  compile and link against the installed libdtensor.so.

Usage: check_install.py SOURCE_ROOT BUILD_DIR CXX [ARG...] -- CC [ARG...]
"""
import os
import subprocess
import sys
import tempfile

SOURCE_EXT = (".c", ".cc", ".cpp", ".cu", ".cuh")
C_PROGRAM = r"""
#include <dtensor/c_api.h>
#include <stdio.h>
#include <string.h>
int main(void) {
  printf("%s\n", dt_version_string());
  return strcmp(dt_version_string(), DT_C_API_VERSION_STRING) == 0 ? 0 : 1;
}
"""


def run(cmd, **kw):
    p = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}\nexited with {p.returncode}:\n{p.stdout}{p.stderr}")
    return p.stdout


def strip_ccache(cmd):
    return [a for a in cmd if os.path.basename(a) != "ccache"]


def main(root, build, cxx, cc):
    problems = []
    expected = set(run([sys.executable, os.path.join(root, "tools", "public_headers.py"), root, *cxx]).split())
    with tempfile.TemporaryDirectory(prefix="dtensor_install_") as dest:
        run(["meson", "install", "-C", build, "--no-rebuild", "--quiet", "--destdir", dest])
        installed = []
        for dirpath, _, files in os.walk(dest):
            installed += [os.path.relpath(os.path.join(dirpath, f), dest) for f in files]
        sources = [f for f in installed if f.endswith(SOURCE_EXT) or os.path.basename(f) == "meson.build"]
        if sources:
            problems.append(f"{len(sources)} source files installed, e.g. {', '.join(sorted(sources)[:5])}")
        pcs = [f for f in installed if f.endswith("pkgconfig/dtensor.pc")]
        if len(pcs) != 1:
            problems.append(f"expected one dtensor.pc, found {pcs}")
            return report(problems)
        pc = os.path.join(dest, pcs[0])
        prefix = next(line.split("=", 1)[1].strip() for line in open(pc) if line.startswith("prefix="))
        include = os.path.join(dest, prefix.lstrip("/"), "include", "dtensor")
        headers = {os.path.relpath(os.path.join(d, f), include) for d, _, fs in os.walk(include) for f in fs}
        # api/dtensor/X is installed as dtensor/X; the layers' headers keep their paths.
        want = {h[len("api/dtensor/"):] if h.startswith("api/dtensor/") else h for h in expected} | {"version.h"}
        if headers - want:
            problems.append(f"installed but not public: {', '.join(sorted(headers - want))}")
        if want - headers:
            problems.append(f"public but not installed (meson setup --reconfigure?): {', '.join(sorted(want - headers))}")

        env = dict(os.environ, PKG_CONFIG_PATH=os.path.dirname(pc))
        flags = run(["pkg-config", f"--define-variable=prefix={os.path.join(dest, prefix.lstrip('/'))}", "--cflags",
                     "--libs", "dtensor"], env=env).split()
        work = os.path.join(dest, "work")
        os.makedirs(work)
        c_src = os.path.join(work, "version.c")
        with open(c_src, "w") as f:
            f.write(C_PROGRAM)
        builds = [
            [*strip_ccache(cxx), "-std=c++20", "-O0", os.path.join(root, "examples", "readme_example.cc"), *flags,
             "-o", os.path.join(work, "readme_example")],
            [*strip_ccache(cc), "-std=c99", "-pedantic", "-Wall", "-Werror", c_src, *flags, "-o",
             os.path.join(work, "version")],
        ]
        for cmd in builds:
            try:
                run(cmd, cwd=work)  # from an empty folder: nothing of the source tree is on the include path
            except RuntimeError as e:
                problems.append(f"does not build against the installed tree: {e}")
    return report(problems, len(headers))


def report(problems, n_headers=0):
    for p in problems:
        print("FAIL:", p)
    if not problems:
        print(f"install: {n_headers} headers (the public ones), no sources; the README's example and a C99 program "
              f"build against the installed tree through dtensor.pc")
    return 1 if problems else 0


if __name__ == "__main__":
    args = sys.argv[1:]
    if len(args) < 5 or "--" not in args[2:]:
        sys.exit(__doc__)
    split = args.index("--", 2)
    sys.exit(main(os.path.abspath(args[0]), os.path.abspath(args[1]), args[2:split], args[split + 1:]))
