#!/usr/bin/env bash
# The GPU checks: build here, run on a GPU machine that may have no compiler.
#
#   tests/gpu/run.sh pack [DIR]   # here: build the GPU test binaries (CUDA on, sm_90), dtrun and the device bench,
#                                 # strip them into DIR (default gpu-pack, git-ignored) with the shared libraries
#                                 # they need that are not system or CUDA ones, and a list of the tests
#   tests/gpu/run.sh run [DIR]    # there: run everything in DIR under one 8-minute timeout and print a summary
#   tests/gpu/run.sh local [ARGS] # a GPU machine with meson and nvcc: build and `meson test --suite gpu ARGS`
#   tests/gpu/run.sh preflight-selftest  # the library preflight of `run` checks itself (run does this first too)
#
# With the device tool, which copies the working tree plus carried ignored paths (64 MiB at most):
#   tests/gpu/run.sh pack                                   # here, then
#   run(command: "tests/gpu/run.sh run gpu-pack", carry: ["gpu-pack"], timeout_s: 540)
#
# `run` runs the NCCL tests and everything else one at a time (one GPU), then compute-sanitizer's memcheck over the
# kernel tests (when compute-sanitizer is on the machine: PATH or /usr/local/cuda/bin; it is not packed), then the
# device bench (bench/gpu_bench, JSON lines: kernels against a device-to-device copy, collectives against raw
# NCCL). It ends with "N passed, N failed, N skipped"; without a usable GPU every test exits 77 and is counted as
# skipped. Before any test
# it puts the NVIDIA pip wheels' library folders (PyTorch's NCCL) on the loader path and checks with ldd that every
# packed binary's libraries resolve (a missing one is named, and nothing runs); each result line is printed as it
# happens; the logs come back as one archive, $OUT/gpu-logs.tar.gz, beside results.tsv and gpu_bench.jsonl. Tests
# stop 30 s before the outer limit (NOT-RUN(time), counted as failed), so that the summary is always printed.
# The pack leaves out libcudart, libnccl and libcublas(Lt): the GPU machine has them in /usr/local/cuda/lib64 (and
# cuBLAS alone is over 500 MB); `run` puts that folder on LD_LIBRARY_PATH after the pack's own lib/.
#
# Environment: BUILD_DIR (pack/local; default build-gpu), GPU_ARCHS (default 90: H100/H200), JOBS (build jobs,
# default: all cores), GPU_RUN_TIMEOUT (run: seconds for everything, default 480).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
mode=${1:-local}
[ $# -gt 0 ] && shift
py=/usr/bin/python3
[ -x "$py" ] || py=python3

# The ninja targets of the tests in suite 'gpu' (their executables and what they run), one per word.
gpu_targets() {
  meson introspect --tests --targets "$1" | "$py" -c '
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
' "$1"
}

configure_and_build() {  # BUILD_DIR EXTRA_TARGETS...
  local build=$1
  shift
  for tool in meson ninja; do
    command -v "$tool" >/dev/null || { echo "run.sh: $tool is not installed (./dev deps installs it)" >&2; exit 2; }
  done
  if [ ! -f "$build/build.ninja" ]; then
    meson setup "$build" -Dcuda=enabled -Dgpu_archs="${GPU_ARCHS:-90}" -Dbuildtype=debugoptimized
  fi
  ninja -C "$build" build.ninja >/dev/null  # reconfigure first when a meson.build changed: the test list may have
  local targets
  targets=$(gpu_targets "$build")
  if [ -z "$targets" ]; then
    echo "run.sh: no test in suite 'gpu' (is CUDA enabled in $build?)" >&2
    exit 2
  fi
  echo "run.sh: building $(echo "$targets $*" | wc -w) target(s) with ${JOBS:-$(nproc)} jobs"
  # shellcheck disable=SC2086
  ninja -C "$build" -j "${JOBS:-$(nproc)}" $targets "$@"
}

# The library folders of the NVIDIA pip wheels (nvidia-nccl-cu13, nvidia-cublas, ...) under every python3's
# site-packages: a GPU machine whose NCCL came with PyTorch has libnccl.so.2 there and nowhere on the loader path.
nvidia_wheel_libs() {
  for p in python3 /usr/bin/python3; do
    command -v "$p" >/dev/null || continue
    "$p" -c '
import glob, site, sys
dirs = list(site.getsitepackages()) + [site.getusersitepackages()]
print("\n".join(sorted({d for s in dirs for d in glob.glob(s + "/nvidia/*/lib")})))' 2>/dev/null || true
  done | awk 'NF && !seen[$0]++' | paste -sd: -
}

# Reads `ldd` output of the binaries (lines "== bin/NAME" then ldd's) on stdin; prints one line per library that does
# not resolve, naming the binaries that need it; exits 1 if any.
missing_libraries() {
  awk '/^== / {bin = $2; next}
       /=> not found/ {need[$1] = need[$1] (need[$1] == "" ? "" : ", ") bin; n++}
       END {for (l in need) printf "run.sh: preflight: %s is not found on the loader path; needed by %s\n", l, need[l]
            exit n > 0}'
}

# preflight DIR: every packed binary's libraries resolve (else the tests would all exit 127 and say nothing).
preflight() {
  local b
  for b in "$1"/bin/*; do
    case "$b" in *.py) continue ;; esac
    echo "== bin/$(basename "$b")"
    ldd "$b" 2>&1 || true
  done | missing_libraries
}

# The preflight's own check: a missing library must be named with its binaries, a complete set must pass.
preflight_selftest() {
  local out
  out=$(printf '== bin/a\n\tlibnccl.so.2 => not found\n\tlibc.so.6 => /lib/libc.so.6 (0x1)\n== bin/b\n\tlibnccl.so.2 => not found\n' |
    missing_libraries) && { echo "run.sh: preflight self-test: a missing library passed" >&2; return 1; }
  case "$out" in *"libnccl.so.2 is not found"*"needed by bin/a, bin/b"*) ;; *)
    echo "run.sh: preflight self-test: wrong report: $out" >&2; return 1 ;; esac
  printf '== bin/a\n\tlibc.so.6 => /lib/libc.so.6 (0x1)\n' | missing_libraries >/dev/null ||
    { echo "run.sh: preflight self-test: a complete set failed" >&2; return 1; }
  echo "run.sh: preflight self-test passed"
}

# Decompresses FILE (.xz or .gz) to stdout: with xz or gzip where installed, else with Python's lzma / gzip modules.
decompress() {
  case "$1" in
    *.xz) if command -v xz >/dev/null; then xz -dc "$1"; else "$py" -c 'import lzma, shutil, sys
shutil.copyfileobj(lzma.open(sys.argv[1]), sys.stdout.buffer)' "$1"; fi ;;
    *) if command -v gzip >/dev/null; then gzip -dc "$1"; else "$py" -c 'import gzip, shutil, sys
shutil.copyfileobj(gzip.open(sys.argv[1]), sys.stdout.buffer)' "$1"; fi ;;
  esac
}

case "$mode" in
preflight-selftest)
  preflight_selftest
  ;;

pack)
  cd "$root"
  build=${BUILD_DIR:-build-gpu}
  dir=${1:-gpu-pack}
  t0=$(date +%s)
  configure_and_build "$build" bench/gpu_bench
  rm -rf "$dir"
  stage=$dir/stage  # bin/ and lib/, compressed into payload.tar.xz at the end
  mkdir -p "$stage/bin" "$stage/lib"
  # tests.json: each gpu test as run.sh run will run it (paths into the build folder become bin/<name>).
  meson introspect --tests "$build" | "$py" -c '
import json, os, sys
build, out = os.path.realpath(sys.argv[1]), sys.argv[2]
rows, bins = [], set()
for t in json.load(sys.stdin):
    if not any(s == "gpu" or s.endswith(":gpu") for s in t.get("suite", [])):
        continue
    cmd = []
    for i, a in enumerate(t["cmd"] + t.get("args", [])):
        if i == 0 and os.path.basename(a).startswith("python3"):  # a test script: the python3 of the GPU machine
            cmd.append("python3")
            continue
        f = os.path.realpath(a if os.path.isabs(a) else os.path.join(build, a))
        if f.startswith(build + os.sep) and os.path.isfile(f):
            bins.add(f)
            a = "bin/" + os.path.basename(a)
        elif f.endswith(".py") and os.path.isfile(f):  # a test script of the source tree (run by python3 there)
            bins.add(f)
            a = "bin/" + os.path.basename(a)
        cmd.append(a)
    env = {k: v for k, v in t.get("env", {}).items() if k.startswith("DT_") or k.startswith("UCX_")}
    rows.append({"name": t["name"], "cmd": cmd, "env": env, "timeout": t.get("timeout") or 120})
rows.sort(key=lambda r: r["name"])
json.dump(rows, open(out, "w"), indent=1)
print("\n".join(sorted(bins)))
' "$build" "$dir/tests.json" > "$dir/.bins"
  echo "$build/bench/gpu_bench" >> "$dir/.bins"
  while read -r b; do
    cp "$b" "$stage/bin/"
    case "$b" in *.py) continue ;; esac
    strip --strip-unneeded "$stage/bin/$(basename "$b")"
  done < "$dir/.bins"
  rm "$dir/.bins"
  # Shared libraries: everything ldd resolves outside the C/C++ runtime and the CUDA folder (see the header).
  # (test scripts are not binaries: ldd fails on them, which pipefail would turn into an exit)
  for b in "$stage"/bin/*; do
    case "$b" in *.py) continue ;; esac
    ldd "$b" 2>/dev/null | awk '$2 == "=>" && $3 ~ /^\// {print $3}'
  done | sort -u |
    while read -r lib; do
      name=$(basename "$lib")
      case "$lib" in
        /usr/local/cuda*) continue ;;
      esac
      case "$name" in
        libc.so* | libm.so* | libdl.so* | librt.so* | libpthread.so* | ld-linux* | libgcc_s.so* | libstdc++.so*) continue ;;
        libcuda.so* | libcudart.so* | libnccl.so* | libcublas*) continue ;;
      esac
      cp -L "$lib" "$stage/lib/$name"
      strip --strip-unneeded "$stage/lib/$name" 2>/dev/null || true
    done
  # UCX loads its transports as modules from <libucs folder>/ucx.
  ucs=$(for b in "$stage"/bin/*; do
    case "$b" in *.py) continue ;; esac
    ldd "$b" 2>/dev/null || true
  done | awk '$1 ~ /^libucs\.so/ && !seen++ {print $3}')
  if [ -n "$ucs" ] && [ -d "$(dirname "$ucs")/ucx" ]; then
    mkdir -p "$stage/lib/ucx"
    cp -L "$(dirname "$ucs")"/ucx/*.so* "$stage/lib/ucx/" 2>/dev/null || true
    # Modules that need libraries this machine's UCX was built against but the pack lacks are left out by UCX.
  fi
  git -C "$root" rev-parse --short HEAD > "$dir/COMMIT" 2>/dev/null || true
  { echo "packed $(date -u +%FT%TZ) from $(cat "$dir/COMMIT" 2>/dev/null) on $(uname -n)"; ls -lR "$stage"; } > "$dir/PACKED"
  raw=$(du -sm "$stage" | cut -f1)
  if command -v xz >/dev/null; then
    tar -C "$stage" -cf - bin lib | xz -6 -T2 > "$dir/payload.tar.xz"
  else
    tar -C "$stage" -czf "$dir/payload.tar.gz" bin lib
  fi
  rm -rf "$stage"
  size=$(du -sm "$dir" | cut -f1)
  echo "run.sh: packed $(grep -c '^-' "$dir/PACKED") files (binaries, libraries, UCX modules; ${raw} MB stripped)" \
       "into $(ls "$dir"/payload.tar.*): ${size} MB in all, $(($(date +%s) - t0)) s"
  [ "$size" -lt 64 ] || echo "run.sh: WARNING: $dir is over the device tool's 64 MiB carry limit" >&2
  ;;

run)
  cd "$root"
  dir=$(cd "${1:-gpu-pack}" && pwd)
  [ -f "$dir/tests.json" ] || { echo "run.sh: $dir/tests.json not found: run 'tests/gpu/run.sh pack' first" >&2; exit 2; }
  if [ -z "${GPU_RUN_INNER:-}" ]; then  # one outer timeout for everything, 30 s beyond the tests' own deadline
    budget=${GPU_RUN_TIMEOUT:-480}
    GPU_RUN_INNER=1 GPU_RUN_DEADLINE=$(($(date +%s) + budget - 30)) exec timeout --kill-after=15 "$budget" "$0" run "$dir"
  fi
  t0=$(date +%s)
  pack=$dir
  dir=$(mktemp -d "${TMPDIR:-/tmp}/gpu-pack.XXXXXX")  # the pack's folder may be read-only
  trap 'rm -rf "$dir"' EXIT
  decompress "$(ls "$pack"/payload.tar.* | head -n 1)" | tar -C "$dir" -xf -
  cp "$pack/tests.json" "$pack/COMMIT" "$dir/" 2>/dev/null || true
  wheels=$(nvidia_wheel_libs)
  export LD_LIBRARY_PATH="$dir/lib:/usr/local/cuda/lib64${wheels:+:$wheels}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  [ -n "$wheels" ] && echo "run.sh: NVIDIA wheel libraries on the loader path: $wheels"
  [ -d "$dir/lib/ucx" ] && export UCX_MODULE_DIR="$dir/lib/ucx"
  # Modules load when the process starts, not inside a test's blocked-stream window (lazy loading can deadlock there).
  export CUDA_MODULE_LOADING=EAGER
  preflight_selftest >/dev/null || exit 2
  preflight "$dir" || { echo "run.sh: preflight failed: no test was run" >&2; exit 2; }
  echo "run.sh: preflight: every packed binary's libraries resolve"
  # The logs: one archive (the device tool brings back 8 files), results.tsv and the bench's JSON lines beside it.
  out=${OUT:-$pack}
  logs=$dir/logs
  mkdir -p "$logs"
  trap 'tar -C "$dir" -czf "$out/gpu-logs.tar.gz" logs 2>/dev/null; cp "$logs/results.tsv" "$logs/gpu_bench.jsonl" "$out/" 2>/dev/null; rm -rf "$dir"' EXIT
  echo "run.sh: pack $(cat "$dir/COMMIT" 2>/dev/null || echo '?'), logs in $logs"
  if command -v nvidia-smi >/dev/null; then
    nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv,noheader | sed 's/^/run.sh: GPU /'
  else
    echo "run.sh: nvidia-smi not found: the GPU tests will probably be skipped"
  fi
  results=$logs/results.tsv
  : > "$results"
  run_one() {  # NAME TIMEOUT CMD... (env already set); appends "name result seconds" to results.tsv
    local name=$1 limit=$2
    shift 2
    local s rc=0 res ms
    if [ -n "${GPU_RUN_DEADLINE:-}" ] && [ $(($(date +%s) + limit)) -gt "$GPU_RUN_DEADLINE" ]; then
      limit=$((GPU_RUN_DEADLINE - $(date +%s)))  # what is left before the summary's reserve
      if [ "$limit" -le 5 ]; then
        printf '%s\t%s\t0\n' "$name" "NOT-RUN(time)" | tee -a "$results" | sed 's/^/run.sh: /'
        return
      fi
    fi
    s=$(date +%s%N)
    (cd "$dir" && timeout --kill-after=5 "$limit" "$@") > "$logs/$name.log" 2>&1 || rc=$?
    ms=$((($(date +%s%N) - s) / 1000000))
    case $rc in
      0) res=PASS ;;
      77) res=SKIP ;;
      124 | 137) res=TIMEOUT ;;
      *) res="FAIL($rc)" ;;
    esac
    printf '%s\t%s\t%d.%d\n' "$name" "$res" $((ms / 1000)) $((ms % 1000 / 100)) | tee -a "$results" | sed 's/^/run.sh: /'

    [ "$res" = PASS ] || [ "$res" = SKIP ] || tail -n 30 "$logs/$name.log" | sed "s/^/  $name| /"
  }
  # The tests, one at a time (NCCL tests must not share the GPU with each other).
  while read -r line; do
    eval "run_one $line"  # NAME TIMEOUT env K=V... CMD..., shell-quoted by the lines below
  done < <("$py" -c '
import json, shlex, sys
for t in json.load(open(sys.argv[1])):
    words = [t["name"], str(int(t["timeout"])), "env"] + [f"{k}={v}" for k, v in t["env"].items()] + t["cmd"]
    print(" ".join(shlex.quote(w) for w in words))
' "$dir/tests.json")
  # memcheck over the kernel tests.
  sanitizer=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null || true)
  for k in test_kernels_cuda test_kernels_ops_cuda test_core_cuda; do
    [ -x "$dir/bin/$k" ] || continue
    if [ -n "$sanitizer" ]; then
      run_one "memcheck_$k" 240 "$sanitizer" --tool memcheck --error-exitcode 1 "bin/$k"
    else
      printf '%s\t%s\t%s\n' "memcheck_$k" "SKIP(no compute-sanitizer)" 0 >> "$results"
    fi
  done
  # Device benchmarks: JSON lines.
  bench_rc=0
  (cd "$dir" && timeout 120 bin/gpu_bench) > "$logs/gpu_bench.jsonl" 2> "$logs/gpu_bench.err" || bench_rc=$?
  echo "---- summary ($(($(date +%s) - t0)) s) ----"
  "$py" - "$results" "$logs/gpu_bench.jsonl" "$bench_rc" <<'PY'
import json, sys
passed = failed = skipped = 0
for line in open(sys.argv[1]):
    name, res, secs = line.rstrip("\n").split("\t")
    print(f"  {res:<28} {float(secs):6.1f} s  {name}")
    if res == "PASS":
        passed += 1
    elif res.startswith("SKIP"):
        skipped += 1
    else:
        failed += 1
rc = int(sys.argv[3])
rows = [json.loads(l) for l in open(sys.argv[2]) if l.startswith("{")]
if rows:
    print("  bench (ratio = our time / reference time):")
    for r in rows:
        print(f"    {r['op']:<18} {r['bytes']:>10} B  {r['us']:9.1f} us  {r['GBps']:7.1f} GB/s  vs {r['ref']} {r['ref_GBps']:7.1f} GB/s  x{r['ratio']:.2f}")
    for r in rows:
        print(json.dumps(r))
else:
    print(f"  bench: {'skipped (no GPU)' if rc == 77 else f'no rows (exit {rc})'}")
print(f"{passed} passed, {failed} failed, {skipped} skipped")
sys.exit(1 if failed else 0)
PY
  ;;

local)
  cd "$root"
  build=${BUILD_DIR:-build-gpu}
  if command -v nvidia-smi >/dev/null; then
    nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv,noheader | sed 's/^/run.sh: GPU /'
  else
    echo "run.sh: nvidia-smi not found: the GPU tests will probably be skipped" >&2
  fi
  configure_and_build "$build"
  rc=0
  meson test -C "$build" --suite gpu --no-rebuild --print-errorlogs --num-processes 1 "$@" || rc=$?
  "$py" - "$build/meson-logs/testlog.json" <<'PY'
import json, sys
passed = failed = skipped = 0
for line in open(sys.argv[1]):
    if not line.strip():
        continue
    t = json.loads(line)
    r = t.get("result", "")
    print(f"  {r:<8} {t.get('duration', 0.0):7.1f} s  {t.get('name', '?')}")
    if r in ("OK", "EXPECTEDFAIL"):
        passed += 1
    elif r == "SKIP":
        skipped += 1
    else:
        failed += 1
print(f"{passed} passed, {failed} failed, {skipped} skipped")
PY
  exit $rc
  ;;

*)
  echo "usage: tests/gpu/run.sh pack [DIR] | run [DIR] | local [meson test args]" >&2
  exit 2
  ;;
esac
