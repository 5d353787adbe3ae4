#!/usr/bin/env bash
# ./dev bench: benchmarks side by side with their references. Usage: bench/run.sh BUILD_DIR
set -euo pipefail
echo "no benchmarks yet"
