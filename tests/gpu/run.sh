#!/usr/bin/env bash
# Runs every GPU test (meson suite 'gpu') on a machine with a GPU: configures a CUDA build the first time, builds
# only what the GPU tests need, runs them and prints a summary ("N passed, N failed, N skipped").
#
#   tests/gpu/run.sh                      # all GPU tests
#   tests/gpu/run.sh --suite collectives  # extra arguments go to `meson test` (here: only GPU tests of that suite)
#
# Environment: BUILD_DIR (default build-gpu), GPU_ARCHS (default 90: H100/H200), JOBS (build jobs, default: all
# cores), GPU_TEST_JOBS (test binaries run at once on the GPU, default 4).
# Without a usable GPU every test exits 77 and is reported as skipped, so "0 passed" means nothing ran.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
build=${BUILD_DIR:-build-gpu}
archs=${GPU_ARCHS:-90}
jobs=${JOBS:-$(nproc)}
py=/usr/bin/python3
[ -x "$py" ] || py=python3

for tool in meson ninja; do
  command -v "$tool" >/dev/null || { echo "run.sh: $tool is not installed (./dev deps installs it)" >&2; exit 2; }
done
if command -v nvidia-smi >/dev/null; then
  nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv,noheader | sed 's/^/run.sh: GPU /'
else
  echo "run.sh: nvidia-smi not found: the GPU tests will probably be skipped" >&2
fi

if [ ! -f "$build/build.ninja" ]; then
  meson setup "$build" -Dcuda=enabled -Dgpu_archs="$archs" -Dbuildtype=debugoptimized
fi

# The build targets the 'gpu' tests depend on (their executables and anything they run), as ninja paths.
targets=$(meson introspect --tests --targets "$build" | "$py" -c '
import json, os, sys
info = json.load(sys.stdin)
files = {t["id"]: t["filename"] for t in info["targets"]}
build = os.path.realpath(sys.argv[1])
out = set()
for t in info["tests"]:
    if not any(s == "gpu" or s.endswith(":gpu") for s in t.get("suite", [])):  # suites read "project:gpu"
        continue
    for dep in t.get("depends", []):
        for f in files.get(dep, []):
            out.add(os.path.relpath(os.path.realpath(f), build))
print(" ".join(sorted(out)))
' "$build")
if [ -z "$targets" ]; then
  echo "run.sh: no test in suite 'gpu' (is CUDA enabled in $build?)" >&2
  exit 2
fi
echo "run.sh: building $(echo "$targets" | wc -w) target(s) with $jobs jobs"
# shellcheck disable=SC2086
ninja -C "$build" -j "$jobs" $targets

rc=0
meson test -C "$build" --suite gpu --no-rebuild --print-errorlogs --num-processes "${GPU_TEST_JOBS:-4}" "$@" || rc=$?

"$py" - "$build/meson-logs/testlog.json" <<'PY'
import json, sys
passed = failed = skipped = 0
rows = []
with open(sys.argv[1]) as f:
    for line in f:
        line = line.strip()
        if not line:
            continue
        t = json.loads(line)
        r = t.get("result", "")
        rows.append((t.get("name", "?"), r, t.get("duration", 0.0)))
        if r in ("OK", "EXPECTEDFAIL"):
            passed += 1
        elif r == "SKIP":
            skipped += 1
        else:
            failed += 1
for name, r, d in rows:
    print(f"  {r:<8} {d:7.1f} s  {name}")
print(f"{passed} passed, {failed} failed, {skipped} skipped")
PY
exit $rc
