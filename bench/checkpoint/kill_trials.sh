#!/usr/bin/env bash
# The kill test of ./dev test with more trials (default 200): a checkpoint writer on 2 processes SIGKILLed at random
# points of its saves; the newest complete checkpoint must always load bit for bit. Prints one line per trial and
# the counts (trials, kills inside a save, exact, wrong, hangs).
#
# usage: bench/checkpoint/kill_trials.sh BUILD_DIR [TRIALS] [SEED]
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=$(cd "${1:?usage: kill_trials.sh BUILD_DIR [TRIALS] [SEED]}" && pwd)
ninja -C "$build" tools/dtrun tests/dtensor/checkpoint_writer >&2
exec /usr/bin/python3 "$root/tests/dtensor/test_checkpoint_kill.py" "$build/tools/dtrun" \
  "$build/tests/dtensor/checkpoint_writer" --trials "${2:-200}" --seed "${3:-7}"
