#!/usr/bin/env bash
# ./dev bench: the benchmarks side by side with their references. Usage: bench/run.sh BUILD_DIR
#
# Host collectives: bench/collectives (UCX) and the OpenMPI reference (bench/mpi_collectives under mpirun, shared
# memory) run in alternating rounds (shared machines drift: never compare runs made minutes apart), for 2 and 4 ranks,
# with the machine's copy and reduction bandwidth (bench/membw) measured in the same rounds for the single-copy limits.
# Prints every JSON line as it comes, then a table per rank count: the median busbw over the rounds of each (op, size),
# the ratio dtensor / OpenMPI (all_gather_inplace against OpenMPI's out-of-place all_gather), and for 16 MiB and up the
# fraction of the single-copy limit (model in bench/README.md). Both sides use malloc'ed buffers, as the reference
# does; columns "pool" repeat dtensor's rows with buffers from dtensor's host pool, which is what tensors get (huge
# pages: Note [Huge pages for host blocks] in core/allocator.cc), against the same OpenMPI figures. The targets are
# judged on the malloc'ed rows; a second count says how the pool rows fare against them.
#
# For all_gather and all_to_all from 64 KiB it also prints each library against the copy floor measured in the same
# rounds (bench/copy_floor: the own block by memcpy and each peer's block by one process_vm_readv, nothing else).
#
# Then the other benchmarks of the build (bench/ops: local op kernels against raw BLAS; bench/train: the GPT training
# step against PyTorch; bench/attention: the fused attention against the composed one and PyTorch; bench/generate:
# decoding against transformers' generate; bench/fsdp: FSDP against PyTorch FSDP2; bench/checkpoint: sharded checkpoints against raw
# file I/O and torch.distributed.checkpoint; bench/trainer: the trainer dttrain against PyTorch FSDP2; the PyTorch sides
# from a virtual environment made in the build folder the first time), each printing its own table.
#
# Environment: DT_BENCH_ROUNDS (3), DT_BENCH_RANKS ("2 4"), DT_BENCH_SAMPLES (9), DT_BENCH_WARMUP (3),
# DT_BENCH_REDIST_SAMPLES (25: alternating redistribution / bare samples per row of bench/redistribute),
# DT_BENCH_NO_MPI=1 to skip the reference,
# DT_BENCH_ONLY=collectives|ops|redistribute|attention|generate|train|fsdp|checkpoint|trainer|trace|pipeline;
# bench/train/run.py, bench/fsdp/run.py, bench/checkpoint/run.py and bench/trainer/run.py list their own
# (DT_BENCH_TRAIN_*, DT_BENCH_FSDP_*, DT_BENCH_CKPT_*, DT_BENCH_TRAINER_*; DT_BENCH_VENV: the PyTorch venv).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-build}
case "$build" in /*) ;; *) build="$root/$build" ;; esac
rounds=${DT_BENCH_ROUNDS:-3}
ranks_list=${DT_BENCH_RANKS:-"2 4"}
samples=${DT_BENCH_SAMPLES:-9}
warmup=${DT_BENCH_WARMUP:-3}
bench="$build/bench/collectives"
mpi_bench="$build/bench/mpi_collectives"  # built when Meson finds MPI (bench/meson.build)
membw="$build/bench/membw"
floor_bench="$build/bench/copy_floor"
dtrun="$build/tools/dtrun"
only=${DT_BENCH_ONLY:-}
if [ -z "$only" ] || [ "$only" = ops ]; then
  if [ -x "$build/bench/ops" ]; then
    echo "== bench/ops" >&2
    "$build/bench/ops"
  fi
  [ "$only" = ops ] && exit 0
fi
if [ -z "$only" ] || [ "$only" = redistribute ]; then
  # Each redistribution transition against the bare collective it performs, in the same run.
  if [ -x "$build/bench/redistribute" ]; then
    for n in $ranks_list; do
      echo "== bench/redistribute, $n ranks" >&2
      if [ "$n" -gt "$(nproc)" ]; then
        echo "   ($n ranks on $(nproc) cores: ranks share cores, so both columns include waiting for the scheduler)" >&2
      fi
      "$build/tools/dtrun" --nproc-per-node "$n" "$build/bench/redistribute" "${DT_BENCH_REDIST_SAMPLES:-25}"
    done
  fi
  [ "$only" = redistribute ] && exit 0
fi
# The Python drivers, each its own table against its reference (bench/<name>/run.py):
#   attention   the fused attention against the composed one and PyTorch's CPU scaled_dot_product_attention
#   generate    greedy decoding against transformers' generate, and tensor-parallel decoding's per-token latency
#   train       dtensor's GPT training step (examples/train_gpt) against its PyTorch twin, one process and tp=2
#   fsdp        dtensor's FSDP (bench/fsdp_mlp, examples/train_gpt --fsdp) against PyTorch FSDP2 on gloo
#   checkpoint  sharded checkpoints (bench/ckpt_bench) against raw file I/O and torch.distributed.checkpoint
#   trainer     the trainer tools/dttrain (FSDP, 2 processes) against PyTorch FSDP2 on gloo: the same Llama, token
#               file (the King James Bible) and recipe
#   trace       what DT_TRACE costs: train_gpt untraced and traced, one process and FSDP on 2
#   pipeline    each pipeline schedule's bubble, measured from the per-rank timelines, against its theory
for driver in attention generate train fsdp checkpoint trainer trace pipeline; do
  [ -z "$only" ] || [ "$only" = "$driver" ] || continue
  echo "== bench/$driver" >&2
  [ "$only" = "$driver" ] && exec /usr/bin/python3 "$root/bench/$driver/run.py" "$build"
  /usr/bin/python3 "$root/bench/$driver/run.py" "$build" || echo "bench/run.sh: bench/$driver failed (above)" >&2
done
for f in "$bench" "$dtrun"; do
  [ -x "$f" ] || { echo "bench/run.sh: $f is missing (build first: ./dev build)" >&2; exit 1; }
done
mpi=1
if [ "${DT_BENCH_NO_MPI:-0}" = 1 ] || [ ! -x "$mpi_bench" ] || ! command -v mpirun >/dev/null; then
  mpi=0
  echo "bench/run.sh: running without the OpenMPI reference ($mpi_bench and mpirun: ./dev deps installs OpenMPI," \
    "then reconfigure: meson setup --reconfigure $build)" >&2
fi

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
results="$out/results.jsonl"
# mpirun binds each rank to a core when the ranks fit on the cores (and not when oversubscribed); do the same for
# dtensor's ranks so that both run under the same conditions (unbound, two spinning ranks on a busy 2-core machine
# lose their co-scheduling and small collectives slow down by 10-100x).
bind="$out/bind_rank.sh"
printf '#!/bin/sh\nexec taskset -c "$DT_LOCAL_RANK" "$@"\n' > "$bind"
chmod +x "$bind"
cores=$(nproc)
start=$(date +%s)
for round in $(seq 1 "$rounds"); do
  echo "== round $round/$rounds" >&2
  if [ -x "$membw" ]; then
    "$membw" 5 | tee -a "$results"
  fi
  for n in $ranks_list; do
    # Alternate which goes first, so that neither always runs on the warmer (or busier) machine.
    order="dtensor mpi"
    [ $((round % 2)) = 0 ] && order="mpi dtensor"
    for who in $order; do
      if [ "$who" = dtensor ]; then
        wrap=()
        if [ "$n" -le "$cores" ] && command -v taskset >/dev/null; then wrap=("$bind"); fi
        "$dtrun" --nproc-per-node "$n" "${wrap[@]}" "$bench" "$samples" "$warmup" 2>/dev/null | tee -a "$results"
        # The same with buffers from dtensor's pool, as tensors get them (huge pages).
        DT_BENCH_BUFFERS=pool "$dtrun" --nproc-per-node "$n" "${wrap[@]}" "$bench" "$samples" "$warmup" \
          all_gather,all_gather_inplace,reduce_scatter,all_reduce,all_to_all 2>/dev/null | tee -a "$results"
        # The copies every all_gather / all_to_all must make, alone (bench/copy_floor).
        if [ -x "$floor_bench" ]; then
          "$dtrun" --nproc-per-node "$n" "${wrap[@]}" "$floor_bench" "$samples" "$warmup" 2>/dev/null |
            tee -a "$results" || true
        fi
      elif [ "$mpi" = 1 ]; then
        # OpenMPI over shared memory (ob1 + vader with CMA single copy: the fastest of its settings here).
        mpirun --allow-run-as-root --oversubscribe -np "$n" --mca pml ob1 --mca btl self,vader \
          "$mpi_bench" openmpi-vader "$samples" "$warmup" 2>/dev/null | grep '^{' | tee -a "$results"
      fi
    done
  done
done
echo "== $(($(date +%s) - start)) s" >&2

# The transport's own floor for the small rows: UCX's one-way tag latency between two pinned processes of this host
# (ucx_perftest tag_lat: half a ping-pong), for the message sizes the 2-rank rows send per peer (all_gather: S,
# all_to_all: S/2). A collective on UCX cannot beat one message of its size; OpenMPI uses its own transport (vader).
if command -v ucx_perftest >/dev/null && [ "$cores" -ge 2 ]; then
  port=$((20000 + $$ % 20000))
  for bytes in 2048 4096 32768 65536 524288 1048576; do
    port=$((port + 1))
    taskset -c 0 ucx_perftest -t tag_lat -s "$bytes" -n 5000 -p "$port" >/dev/null 2>&1 &
    server=$!
    sleep 0.5
    lat=$(taskset -c 1 ucx_perftest localhost -t tag_lat -s "$bytes" -n 5000 -p "$port" 2>/dev/null |
      awk '/^Final:/ {print $3}')
    wait "$server" 2>/dev/null || true
    [ -n "$lat" ] && echo "{\"impl\":\"ucx_perftest\",\"bytes\":$bytes,\"oneway_us\":$lat}" | tee -a "$results"
  done
fi

/usr/bin/python3 - "$results" <<'PY'
import json, statistics, sys
from collections import defaultdict

rows = defaultdict(list)
membw = defaultdict(list)
perftest = {}  # message bytes -> UCX one-way latency (us)
for line in open(sys.argv[1]):
    line = line.strip()
    if not line.startswith("{"):
        continue
    r = json.loads(line)
    if r.get("impl") == "membw":
        membw[r["figure"]].append(r["gbs"])
        continue
    if r.get("impl") == "ucx_perftest":
        perftest[r["bytes"]] = r["oneway_us"]
        continue
    rows[(r["impl"], r["op"], r["ranks"], r["bytes"])].append(r)

def med(key):
    v = rows.get(key)
    if not v:
        return None
    return statistics.median(x["busbw_gbs"] for x in v), all(x["ok"] for x in v), len(v)

bc = statistics.median(membw["copy_2t"]) if membw.get("copy_2t") else None
bs = statistics.median(membw["sum_2t"]) if membw.get("sum_2t") else None
if bc and bs:
    print(f"\nmemory bandwidth (median of rounds): copy Bc = {bc:.1f} GB/s, reduce Bs = {bs:.1f} GB/s")

def limit(op, n):
    # Single-copy limit of busbw for out-of-place collectives on data that does not fit in cache.
    if not (bc and bs):
        return None
    if op in ("all_gather", "all_gather_inplace"):
        return bc * (n - 1) / n ** 2
    if op == "all_to_all":
        return bc * (n - 1) / n ** 2
    if op == "reduce_scatter":
        return bs * (n - 1) / (n * (n + 1))
    if op == "all_reduce":
        t = (n + 1) / bs + (n - 1) / bc
        return (1 / t) * 2 * (n - 1) / n
    return None

def size_name(b):
    return f"{b >> 20} MiB" if b >= 1 << 20 else f"{b >> 10} KiB"

ops = ["all_gather", "all_gather_inplace", "reduce_scatter", "all_reduce", "all_to_all", "broadcast"]
targets = []
pool_targets = []
for n in sorted({k[2] for k in rows}):
    print(f"\n{n} ranks: busbw GB/s, median over rounds")
    print(f"{'op':<20} {'size':>8} {'dtensor':>9} {'OpenMPI':>9} {'ratio':>7} {'limit':>7} {'of limit':>9}  ok"
          f" {'pool':>9} {'ratio':>7}")
    for op in ops:
        sizes = sorted({k[3] for k in rows if k[1] == op and k[2] == n})
        for b in sizes:
            d = med(("dtensor-ucx", op, n, b))
            m = med(("openmpi-vader", "all_gather" if op == "all_gather_inplace" else op, n, b))
            if d is None:
                continue
            ratio = d[0] / m[0] if m and m[0] > 0 else None
            lim = limit(op, n) if b >= 16 << 20 else None
            p = med(("dtensor-ucx-pool", op, n, b))
            print(f"{op:<20} {size_name(b):>8} {d[0]:>9.3f} {(f'{m[0]:.3f}' if m else '-'):>9} "
                  f"{(f'{ratio:.2f}x' if ratio else '-'):>7} {(f'{lim:.2f}' if lim else '-'):>7} "
                  f"{(f'{100 * d[0] / lim:.0f}%' if lim else '-'):>9}  {'yes' if d[1] else 'NO':<3}"
                  f" {(f'{p[0]:.3f}' if p else '-'):>9} {(f'{p[0] / m[0]:.2f}x' if p and m and m[0] > 0 else '-'):>7}")
            if p and not p[1]:
                print(f"  the pool-buffer run of {op} {size_name(b)} produced wrong results")
            if n == 2 and ratio:
                want = None
                if op == "reduce_scatter" and b >= 16 << 20:
                    want = 3.0
                elif op == "all_reduce" and b == 64 << 20:
                    want = 2.0
                elif op == "all_gather_inplace" and b >= 16 << 20:
                    want = 1.5
                elif op in ("all_gather", "all_to_all") or b in (64 << 10, 1 << 20):
                    want = 1.0
                if want:
                    targets.append((op, b, ratio, want))
                    if p and m and m[0] > 0:
                        pool_targets.append((op, b, p[0] / m[0], want))
if perftest:
    print("\nUCX one-way tag latency on this host (ucx_perftest tag_lat, 2 pinned processes): " +
          ", ".join(f"{size_name(b) if b >= 1024 else b} {us:.2f} us" for b, us in sorted(perftest.items())))
# The copy floor (bench/copy_floor: own block by memcpy, each peer's block by one process_vm_readv, no
# synchronisation) against each library, from 64 KiB (below that both libraries copy through shared-memory queues,
# which beat a system call).
floor_rows = [(k[1], k[2], k[3]) for k in rows if k[0] == "copy-floor" and k[3] >= 64 << 10]
if floor_rows:
    print("\nall_gather / all_to_all against the copy floor (malloc'ed buffers): busbw as % of the floor's")
    print(f"{'op':<12} {'ranks':>5} {'size':>8} {'floor_us':>9} {'dtensor':>8} {'OpenMPI':>8} {'pool':>8}")
    for op, n, b in sorted(floor_rows):
        f = med(("copy-floor", op, n, b))
        cells = []
        for impl in ("dtensor-ucx", "openmpi-vader", "dtensor-ucx-pool"):
            v = med((impl, op, n, b))
            cells.append(f"{100 * v[0] / f[0]:.0f}%" if v and f and f[0] > 0 else "-")
        t = statistics.median(x["time_us"] for x in rows[("copy-floor", op, n, b)])
        print(f"{op:<12} {n:>5} {size_name(b):>8} {t:>9.1f} {cells[0]:>8} {cells[1]:>8} {cells[2]:>8}")
if targets:
    missed = [t for t in targets if t[2] < t[3]]
    print(f"\n2-rank targets against OpenMPI: {len(targets) - len(missed)} of {len(targets)} met")
    for op, b, ratio, want in missed:
        print(f"  below target: {op} {size_name(b)}: {ratio:.2f}x (target {want:.1f}x)")
if pool_targets:
    missed = [t for t in pool_targets if t[2] < t[3]]
    print(f"with buffers from dtensor's pool (huge pages) against the same OpenMPI rows: "
          f"{len(pool_targets) - len(missed)} of {len(pool_targets)}")
    for op, b, ratio, want in missed:
        print(f"  below: {op} {size_name(b)}: {ratio:.2f}x (target {want:.1f}x)")
PY
