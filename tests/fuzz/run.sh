#!/usr/bin/env bash
# Targets: c_api_args (the C API's argument parsing and pure queries), checkpoint_parsers (the safetensors header and
# the checkpoint index, which a load trusts nothing in), placement_parsers (parse_placement(s), ShardingSpec::parse
# with and without a tensor ndim, each accepted text round-tripping through to_string; and dtplan's option parsing,
# tools/dtplan_parse.h, with the layouts and plan of small accepted requests), store_server (a real TcpStoreServer on
# loopback fed raw bytes before authentication, or frames after a correct handshake; after every input a well-behaved
# client must still get a set/get round trip and no sessions may accumulate).
# Builds the libFuzzer targets with clang (-fsanitize=fuzzer,address,undefined) from the few sources each needs,
# and runs each for a bounded time on its corpus (tests/fuzz/corpus/<target>, kept in the repository; new inputs go
# to the build folder's copy). A crash leaves its input in OUT_DIR and fails the run.
#
# usage: tests/fuzz/run.sh OUT_DIR [SECONDS_PER_TARGET [TARGET...]]   (default: every target; exit 77 when clang's
#        libFuzzer is missing)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
out=${1:?usage: run.sh OUT_DIR [SECONDS [TARGET...]]}
seconds=${2:-20}
shift $(($# < 2 ? $# : 2))
mkdir -p "$out"
if ! command -v clang++ >/dev/null || ! echo 'extern "C" int LLVMFuzzerTestOneInput(const unsigned char*, unsigned long) { return 0; }' |
    clang++ -x c++ -fsanitize=fuzzer - -o "$out/probe" 2>/dev/null; then
  echo "fuzz: clang++ with libFuzzer is not installed (Debian: clang, libclang-rt-14-dev): skipped"
  exit 77
fi
flags=(-std=c++20 -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -I"$root" -I"$root/api"
       -DBOOST_ALL_NO_LIB -w)
core=("$root"/core/*.cc)
placement=("$root"/placement/*.cc)
declare -A sources
sources[c_api_args]="$root/tests/fuzz/c_api_args_fuzz.cc $root/bindings/c_api/placement.cc $root/bindings/c_api/funnel.cc $root/bindings/c_api/errors.cc ${placement[*]} ${core[*]}"
sources[checkpoint_parsers]="$root/tests/fuzz/checkpoint_parsers_fuzz.cc $root/dtensor/checkpoint/index.cc $root/dtensor/checkpoint/safetensors.cc $root/dtensor/checkpoint/box.cc $root/dtensor/checkpoint/file_io.cc ${core[*]}"
sources[placement_parsers]="$root/tests/fuzz/placement_parsers_fuzz.cc ${placement[*]} ${core[*]}"
store=("$root"/collectives/store/{store,store_protocol,tcp_store,tcp_store_server}.cc)
sources[store_server]="$root/tests/fuzz/store_server_fuzz.cc ${store[*]} ${core[*]}"
declare -A libs max_len
libs[checkpoint_parsers]="-lboost_json"
libs[store_server]="-lssl -lcrypto"
max_len[c_api_args]=256
max_len[checkpoint_parsers]=1024  # an index or header of a few tensors
max_len[placement_parsers]=256     # a spec, or dtplan's six option values
max_len[store_server]=512          # a handshake, or a few request frames
rc=0
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=("${!sources[@]}")
for target in "${targets[@]}"; do
  [ -n "${sources[$target]:-}" ] || { echo "fuzz: unknown target '$target' (known: ${!sources[*]})"; exit 2; }
  bin="$out/$target"
  # One object per source through ccache (a re-run compiles nothing), two at a time, then the link.
  objs=()
  for src in ${sources[$target]}; do
    rel=${src#"$root"/}
    objs+=("$out/obj/${rel//\//_}.o")
  done
  mkdir -p "$out/obj"
  # shellcheck disable=SC2086
  printf '%s\n' ${sources[$target]} | xargs -P 2 -I{} sh -c '
    src={}; rel=${src#'"$root"'/}; obj='"$out"'/obj/$(echo "$rel" | tr / _).o
    ccache clang++ '"${flags[*]}"' -c "$src" -o "$obj"'
  # shellcheck disable=SC2086
  clang++ "${flags[@]}" "${objs[@]}" -o "$bin" -lpthread ${libs[$target]:-}
  corpus="$out/corpus/$target"
  mkdir -p "$corpus"
  [ -d "$root/tests/fuzz/corpus/$target" ] && cp -n "$root/tests/fuzz/corpus/$target"/* "$corpus"/ 2>/dev/null || true
  echo "fuzz: $target for ${seconds} s"
  if ! (cd "$out" && "$bin" -max_total_time="$seconds" -max_len="${max_len[$target]}" -timeout=10 -rss_limit_mb=2048 \
        -print_final_stats=1 "$corpus" 2>"$out/$target.log"); then
    echo "fuzz: $target FAILED (crash input and log in $out):"
    tail -n 40 "$out/$target.log"
    rc=1
  else
    grep -E "stat::number_of_executed_units|stat::new_units_added" "$out/$target.log" | sed "s/^/fuzz: $target /"
  fi
done
exit $rc
