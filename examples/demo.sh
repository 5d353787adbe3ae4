#!/usr/bin/env bash
# ./dev demo: the end-to-end showcase. Usage: examples/demo.sh BUILD_DIR
#  1. dtplan: how a tensor lies on a mesh and what a redistribution costs, before running anything.
#  2. 4 processes (UCX over shared memory) on a 2x2 (dp, tp) mesh: a chain of redistributions (uneven, Partial,
#     nested) checked against the full tensor, then a tensor-parallel MLP with loss parallel checked against the
#     single-process computation.
# Each part first builds only the targets it runs (a no-op once built): on a fresh clone the planner, which needs
# only core/ and placement/, prints while the rest is still to compile. Build output goes to stderr.
set -euo pipefail
build=${1:-build}
build_targets() {
  [ -f "$build/build.ninja" ] || return 0  # an installed or prebuilt tree: nothing to build
  ninja -C "$build" "$@" >&2
}
build_targets tools/dtplan
echo "== dtplan: a 7x5 matrix on a 2x3 (dp, tp) mesh, and what S(0),R -> R,S(1) costs"
"$build/tools/dtplan" --shape 7,5 --mesh 2,3 --names dp,tp --from 'S(0),R' --to 'R,S(1)'
echo
build_targets tools/dtrun examples/redistribute_demo
echo "== 4 processes on a 2x2 (dp, tp) mesh: dtrun --nproc-per-node 4 $build/examples/redistribute_demo"
"$build/tools/dtrun" --nproc-per-node 4 --timeout 60 "$build/examples/redistribute_demo"
