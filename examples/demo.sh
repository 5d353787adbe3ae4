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
#  5. dttrain, the trainer: that Hugging Face folder fine-tuned on a real corpus (the King James Bible from Debian's
#     bible-kjv, tokenized by tools/prepare_tokens.py) with FSDP + TP on the 2x2 mesh, from a TOML config: a line per
#     step, a validation loss that falls, a checkpoint, and the curves drawn (dttrain plot) into BUILD_DIR/demo; the
#     run is traced (DT_TRACE) and its last steps drawn as a timeline per rank (dttrace plot).
#  6. dtensor.torch, PyTorch's FSDP2 API on dtensor: one torch.nn GPT script run with dtensor.torch's fully_shard
#     (dtrun) and with PyTorch FSDP2 (torchrun, gloo), the two differing only in their imports: the losses step by
#     step and the step times side by side. Needs torch in BUILD_DIR/py-venv (./dev test installs it), else skipped.
# Each part first builds only the targets it runs (a no-op once built): on a fresh clone the planner, which needs
# only core/ and placement/, prints while the rest is still to compile. Build output goes to stderr; everything the
# demo shows goes to stdout, each line once, whatever stdout is (a terminal, a pipe, a file: ./dev demo > demo.log).
# DT_DEMO_BUILD=0 builds nothing (tests/examples/demo_output_test.py: meson has built the targets already);
# DT_DEMO_TRAIN_STEPS (default 12) is the length of the training runs, DT_DEMO_FINETUNE_STEPS (30) the fine-tune's,
# DT_DEMO_TORCH_STEPS (10) part 6's.
# The fine-tune needs the Python packages tokenizers and matplotlib in BUILD_DIR/py-venv: when building, the demo
# has ./dev fetch the missing ones in the background at its start; without them that part says so and is skipped.
set -euo pipefail
build=${1:-build}
here=$(cd "$(dirname "$0")" && pwd)
build_targets() {
  [ "${DT_DEMO_BUILD:-1}" != 0 ] || return 0
  [ -f "$build/build.ninja" ] || return 0  # an installed or prebuilt tree: nothing to build
  ninja -C "$build" "$@" >&2
}
py_pid=""
if [ "${DT_DEMO_BUILD:-1}" != 0 ] && [ -f "$build/build.ninja" ]; then
  BUILD_DIR="$build" "$here/../dev" py-want tokenizers matplotlib >"$build/demo-py-packages.log" 2>&1 &
  py_pid=$!
fi
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
echo
echo "== pipeline parallelism: the same GPT cut into 2 stages, each on 2 FSDP ranks (pp 2 x dp 2), 1F1B over 4"
echo "   microbatches: dtrun --nproc-per-node 4 $build/examples/train_gpt --pp 2 --dp 2 --fsdp --microbatches 4 --print-schedule ... --json"
# train_gpt prints the schedule and the bubble on stderr under --json: kept beside the JSON lines.
"$build/tools/dtrun" --nproc-per-node 4 --timeout 300 "$build/examples/train_gpt" --pp 2 --dp 2 --fsdp \
  --microbatches 4 --print-schedule "${train_args[@]}" --json 2>"$ckpt/pp.txt" | tee "$ckpt/pp.jsonl" | "${report[@]}"
grep -v '^dtrun' "$ckpt/pp.txt" | sed 's/^/   /'
echo "   (the measured bubble counts every wait outside F and B: 4 processes share this machine's cores and FSDP's"
echo "   gathers; bench/pipeline measures the schedules alone, within a point of theory)"
/usr/bin/python3 "$here/demo_report.py" compare-labelled "pp 2 x dp 2 (1F1B)" "$ckpt/one.jsonl" "$ckpt/pp.jsonl"
echo
echo "== elastic training: FSDP + TP on 4 slots; rank 3 is killed while it writes step 9's checkpoint"
echo "   (DT_FAULT_INJECT=3:checkpoint_save:3:kill). dtrun drops its slot and starts the job again on the 2 slots left;"
echo "   train_gpt takes dp 1 x tp 2 with gradient accumulation 2 (the same global batch), removes the half-written"
echo "   save and resumes from step 6, with no flag:"
echo "   dtrun --nproc-per-node 2:4 --world-multiple 2 --max-restarts 2 $build/examples/train_gpt --dp 2 --tp 2 --fsdp --save-dir ... --save-every 3 ... --json"
DT_FAULT_INJECT=3:checkpoint_save:3:kill "$build/tools/dtrun" --nproc-per-node 2:4 --world-multiple 2 \
  --max-restarts 2 --failure-grace 2 --settle 0.5 --timeout 300 "$build/examples/train_gpt" --dp 2 --tp 2 --fsdp \
  --save-dir "$ckpt/elastic" --save-every 3 "${train_args[@]}" --json 2>"$ckpt/elastic.txt" |
  tee "$ckpt/elastic.jsonl" | "${report[@]}"
grep -E '^dtrun: (rank 3 failed|slot|restarting|generation)|^(elastic|removed|resumed)' "$ckpt/elastic.txt" |
  sed 's/^/   /'
/usr/bin/python3 "$here/demo_report.py" compare-elastic "$ckpt/one.jsonl" "$ckpt/elastic.jsonl"
echo
build_targets tools/dttrain
[ -z "$py_pid" ] || wait "$py_pid" || true
# 5. Fine-tuning the exported GPT on the King James Bible with dttrain (FSDP + TP on 2x2).
py="$build/py-venv/bin/python3"
ft="$ckpt/finetune"
ft_steps=${DT_DEMO_FINETUNE_STEPS:-30}
echo "== fine-tuning that GPT ($ckpt/hf) on the King James Bible with dttrain, FSDP + TP on the 2x2 mesh"
if ! "$py" -c "import tokenizers, matplotlib" 2>/dev/null; then
  echo "   skipped: $py lacks tokenizers or matplotlib (./dev deps installs them; $build/demo-py-packages.log says why not)"
else  # the fine-tune, up to the matching fi (not indented: the config's here-document)
mkdir -p "$ft" "$build/demo"
echo "   the corpus: Debian's bible-kjv (public domain) as a token file, by a byte-level BPE of the model's 512 tokens:"
echo "   tools/prepare_tokens.py --kjv --out $ft/kjv --vocab-size 512"
"$py" "$here/../tools/prepare_tokens.py" --kjv --out "$ft/kjv" --vocab-size 512 >&2
cat >"$ft/finetune.toml" <<EOF
[model]
hf_folder = "$ckpt/hf"
[parallelism]
dp = 2
tp = 2
[training]
steps = $ft_steps
seq = 64
global_batch = 16
[optimizer]
lr = 3e-3
[lr_schedule]
kind = "cosine"
warmup = 3
[data]
path = "$ft/kjv.bin"
val_every = $(((ft_steps + 2) / 3))
[checkpoint]
folder = "$ft/checkpoints"
[logging]
log_file = "$ft/finetune.jsonl"
EOF
echo "   the config, $ft/finetune.toml (every other field at its default; dttrain --help-config lists them):"
sed 's/^/     /' "$ft/finetune.toml"
echo "   DT_TRACE=$ft/trace dtrun --nproc-per-node 4 $build/tools/dttrain $ft/finetune.toml   (every rank's timeline recorded)"
# dttrain prints the resolved config (every field) first: left out here, it is in the checkpoint too.
DT_TRACE="$ft/trace" "$build/tools/dtrun" --nproc-per-node 4 --timeout 300 "$build/tools/dttrain" "$ft/finetune.toml" |
  awk '/^dttrain: resolved config/ { skip = 1; print "dttrain: resolved config (every field; left out here)"; next }
       /^dttrain: / { skip = 0 }
       !skip { print; fflush() }'
/usr/bin/python3 "$here/demo_report.py" finetune "$ft/finetune.jsonl"
PATH="$build/py-venv/bin:$PATH" "$build/tools/dttrain" plot "$ft/finetune.jsonl" --out "$build/demo/finetune.png"
echo "   the timeline of the last steps, one row per rank (tools/dttrace.py plot; dttrace summary and merge read it too):"
"$py" "$here/../tools/dttrace.py" plot "$ft/trace" -o "$build/demo/timeline.png" --steps "$((ft_steps - 1)):$ft_steps"
fi  # the fine-tune
echo
# 6. PyTorch's own API on dtensor: one torch.nn script (bench/torch_front/train_step.py, a GPT) whose two runs differ
#    only in their imports: dtensor.torch's fully_shard under dtrun, and PyTorch FSDP2 under torchrun (gloo).
echo "== PyTorch's FSDP2 API on dtensor: one torch.nn script, 'from dtensor.torch import fully_shard' or PyTorch's"
if ! "$py" -c "import torch" 2>/dev/null; then
  echo "   skipped: $py lacks torch (./dev test installs it into the venv)"
else
  tf="$ckpt/torch_front"
  mkdir -p "$tf"
  speedups=$(ls "$build"/tests/python/_speedups.*.so 2>/dev/null | head -n 1 || true)
  step_args=(--model gpt --batch 8 --steps "${DT_DEMO_TORCH_STEPS:-10}" --threads 1 --json)
  echo "   dtrun --nproc-per-node 2 python3 bench/torch_front/train_step.py --impl dtensor ${step_args[*]}"
  DTENSOR_LIBRARY="$build/libdtensor.so" DTENSOR_SPEEDUPS="$speedups" PYTHONPATH="$here/../bindings/python" \
    OPENBLAS_NUM_THREADS=1 "$build/tools/dtrun" --nproc-per-node 2 --timeout 300 "$py" \
    "$here/../bench/torch_front/train_step.py" --impl dtensor "${step_args[@]}" >"$tf/dtensor.jsonl" 2>"$tf/dtensor.txt"
  echo "   torchrun --nproc-per-node 2 bench/torch_front/train_step.py --impl torch ${step_args[*]}"
  OPENBLAS_NUM_THREADS=1 "$py" -m torch.distributed.run --standalone --nproc-per-node 2 --no-python "$py" \
    "$here/../bench/torch_front/train_step.py" --impl torch "${step_args[@]}" >"$tf/torch.jsonl" 2>"$tf/torch.txt"
  /usr/bin/python3 "$here/demo_report.py" torch-front "$tf/dtensor.jsonl" "$tf/torch.jsonl"
fi
