#!/usr/bin/env bash
# ./dev demo: the end-to-end showcase. Usage: examples/demo.sh BUILD_DIR
#  1. dtplan: how a tensor lies on a mesh and what a redistribution costs, before running anything.
#  2. 4 processes (UCX over shared memory) on a 2x2 (dp, tp) mesh: a chain of redistributions (uneven, Partial,
#     nested) checked against the full tensor, then a tensor-parallel MLP with loss parallel checked against the
#     single-process computation.
#  3. examples/train_gpt: a GPT trained on one process, and the same training as a job that moves: FSDP on 2
#     processes with asynchronous sharded checkpoints, stopped half-way (as if preempted), resumed from its newest
#     checkpoint with FSDP + TP on the 2x2 mesh (parameters sharded over dp by fully_shard, Megatron tensor
#     parallelism over tp), which exports the weights as safetensors at the end; dtckpt shows and verifies the last
#     checkpoint; the losses agree step by step.
#  4. examples/generate: the trained GPT, exported as a Hugging Face Llama folder (nn::save_hf), loaded back onto
#     tp 2 and generating with a KV cache sharded by heads: prompts, continuations, time to first token, tokens/s.
# Each part first builds only the targets it runs (a no-op once built): on a fresh clone the planner, which needs
# only core/ and placement/, prints while the rest is still to compile. Build output goes to stderr; everything the
# demo shows goes to stdout, each line once, whatever stdout is (a terminal, a pipe, a file: ./dev demo > demo.log).
# DT_DEMO_BUILD=0 builds nothing (tests/examples/demo_output_test.py: meson has built the targets already);
# DT_DEMO_TRAIN_STEPS (default 12) is the length of the training runs.
set -euo pipefail
build=${1:-build}
here=$(cd "$(dirname "$0")" && pwd)
build_targets() {
  [ "${DT_DEMO_BUILD:-1}" != 0 ] || return 0
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
echo
build_targets examples/train_gpt tools/dtckpt examples/generate
# 3. Training: the GPT on one process; then FSDP on 2 processes, checkpointing, stopped half-way; then resumed with
#    FSDP + TP on a 2x2 (dp, tp) mesh of 4 processes (batch and parameter shards over dp, Megatron TP with loss
#    parallel over tp), from the same weights on the same data: the losses must agree step by step.
steps=${DT_DEMO_TRAIN_STEPS:-12}
half=$((steps / 2))
ckpt=$(mktemp -d "${TMPDIR:-/tmp}/dtensor_demo_XXXXXX")
trap 'rm -rf "$ckpt"' EXIT
train_args=(--steps "$steps" --layers 2 --dim 128 --heads 4 --vocab 512 --seq 64 --batch 8 --lr 3e-3)
# Every run prints --json lines (each loss to 17 digits, which round-trips the double): they are kept in a file for
# the closing comparison and shown one readable line per step as they arrive (examples/demo_report.py).
report=(/usr/bin/python3 "$here/demo_report.py" steps)
echo "== training a GPT, one process: $build/examples/train_gpt ${train_args[*]} --json"
"$build/examples/train_gpt" "${train_args[@]}" --json | tee "$ckpt/one.jsonl" | "${report[@]}"
echo
echo "== FSDP on 2 processes, a checkpoint every 3 steps (written while training goes on), stopped after step $half:"
echo "   dtrun --nproc-per-node 2 $build/examples/train_gpt --dp 2 --fsdp --save-dir $ckpt --save-every 3 --async-save --stop-at $half ... --json"
"$build/tools/dtrun" --nproc-per-node 2 --timeout 300 "$build/examples/train_gpt" --dp 2 --fsdp \
  --save-dir "$ckpt" --save-every 3 --async-save --stop-at "$half" "${train_args[@]}" --json |
  tee "$ckpt/first.jsonl" | "${report[@]}"
echo "checkpoints kept: $(cd "$ckpt" && echo step-*)"
echo
echo "== resumed from the newest checkpoint with FSDP + TP on a 2x2 (dp, tp) mesh, weights exported at the end:"
echo "   dtrun --nproc-per-node 4 $build/examples/train_gpt --dp 2 --tp 2 --fsdp --save-dir $ckpt --resume --export $ckpt/model.safetensors --export-hf $ckpt/hf ... --json"
"$build/tools/dtrun" --nproc-per-node 4 --timeout 300 "$build/examples/train_gpt" --dp 2 --tp 2 --fsdp \
  --save-dir "$ckpt" --resume --export "$ckpt/model.safetensors" --export-hf "$ckpt/hf" "${train_args[@]}" --json |
  tee "$ckpt/four.jsonl" | "${report[@]}"
echo "exported $ckpt/model.safetensors ($(wc -c <"$ckpt/model.safetensors") bytes)"
echo
echo "== the last checkpoint, inspected and verified: $build/tools/dtckpt info / verify $ckpt/step-$(printf %06d "$steps")"
"$build/tools/dtckpt" info "$ckpt/step-$(printf %06d "$steps")" >"$ckpt/info.txt"
head -n 8 "$ckpt/info.txt"
echo "  ..."
"$build/tools/dtckpt" verify "$ckpt/step-$(printf %06d "$steps")"
echo
echo "== the losses, one process against the job that moved"
/usr/bin/python3 "$here/demo_report.py" compare "$ckpt/one.jsonl" "$ckpt/first.jsonl" "$ckpt/four.jsonl"
echo
echo "== generation: the trained GPT as a Hugging Face folder ($ckpt/hf: $(cd "$ckpt/hf" && echo *)), on tp 2 with a KV"
echo "   cache sharded by heads: dtrun --nproc-per-node 2 $build/examples/generate --model $ckpt/hf --tp 2 --prompt ... --max-new-tokens 16"
"$build/tools/dtrun" --nproc-per-node 2 --timeout 120 "$build/examples/generate" --model "$ckpt/hf" --tp 2 \
  --prompt 7,99,3,250,41 --prompt 12,400 --max-new-tokens 16 --warmup 2
