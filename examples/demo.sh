#!/usr/bin/env bash
# ./dev demo: the end-to-end showcase. Usage: examples/demo.sh BUILD_DIR
set -euo pipefail
build=${1:-build}
echo "== dtplan: how a 7x5 matrix lies on a 2x3 (dp, tp) mesh, and what S(0),R -> R,S(1) costs"
"$build/tools/dtplan" --shape 7,5 --mesh 2,3 --names dp,tp --from 'S(0),R' --to 'R,S(1)'
