#!/usr/bin/env python3
"""dtensor against Hugging Face transformers itself, on tiny Llama-family models made by transformers from configs
(random weights, save_pretrained): grouped-query attention (2 and 1 kv heads), a head_dim of its own, tied and untied
embeddings, q/k/v/o and MLP biases, Qwen2, Llama 3 RoPE scaling, bf16 and f16 on disk, vocabularies that divide neither 2 nor 4.

For every model and layout (1 process, tp 2, FSDP on 2, FSDP + TP on 2 x 2):
- dtensor's logits (examples/generate --logits) equal transformers' forward (f32, 1e-5 relative);
- greedy generation gives transformers.generate(do_sample=False)'s tokens, for prompts of one length and, left-padded,
  of different lengths.
Then fine-tuning: a few AdamW steps in dtensor (hf_finetune_helper) on 1 process and on FSDP + TP 2 x 2 give the
losses of the same steps in PyTorch (torch.optim.AdamW on the transformers model), step by step; the export
(nn::save_hf, sharded, in f32) loads in transformers.AutoModelForCausalLM.from_pretrained and its logits there
equal dtensor's; the export in the model's own dtype (bf16) loads as bf16. Last, bad folders give a clear error naming the file and the tensor or field.

Runs under the build folder's py-venv (DT_PY_VENV) with torch and transformers; exits 77 (skipped) without them.
Usage: test_hf_llama.py DTRUN GENERATE FINETUNE_HELPER
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from py_venv import reexec_in_venv, skip_unless_importable  # noqa: E402

reexec_in_venv()
skip_unless_importable("numpy", "torch", "transformers", "safetensors")
import numpy as np  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402
from safetensors.numpy import load_file, save_file  # noqa: E402

DTRUN, GENERATE, FINETUNE = sys.argv[1:4]
LAYOUTS = [  # (processes, dtensor flags)
    (1, []),
    (2, ["--tp", "2"]),
    (2, ["--dp", "2", "--fsdp"]),
    (4, ["--dp", "2", "--tp", "2", "--fsdp"]),
]
failures = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what, flush=True)
    if not ok:
        failures.append(what)


def models():
    """(name, transformers config, dtype on disk)."""
    L = transformers.LlamaConfig
    yield "llama gqa untied", L(vocab_size=61, hidden_size=32, intermediate_size=40, num_hidden_layers=2,
                                num_attention_heads=4, num_key_value_heads=2, head_dim=12, rope_theta=5000.0,
                                rms_norm_eps=1e-5, tie_word_embeddings=False, max_position_embeddings=64,
                                bos_token_id=None, eos_token_id=None, pad_token_id=0), torch.float32
    yield "llama3 mqa tied biases bf16", L(vocab_size=50, hidden_size=24, intermediate_size=36, num_hidden_layers=2,
                                           num_attention_heads=4, num_key_value_heads=1, attention_bias=True,
                                           mlp_bias=True, tie_word_embeddings=True, max_position_embeddings=64,
                                           rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                                         "high_freq_factor": 4.0,
                                                         "original_max_position_embeddings": 16},
                                           bos_token_id=None, eos_token_id=None, pad_token_id=0), torch.bfloat16
    yield "qwen2 tied f16", transformers.Qwen2Config(vocab_size=67, hidden_size=32, intermediate_size=48,
                                                 num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                                 tie_word_embeddings=True, max_position_embeddings=64,
                                                 bos_token_id=None, eos_token_id=None, pad_token_id=0), torch.float16


def make_model(config, dtype, folder):
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config)
    with torch.no_grad():  # larger weights than the default init, so that the logits are not all near zero
        for p in model.parameters():
            p.normal_(0, 0.3)
    model.to(dtype).save_pretrained(folder, safe_serialization=True)
    # The reference reads back what was written, in f32 (bf16 weights upcast exactly, as dtensor loads them).
    return transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()


def run(cmd, nproc, expect_ok=True):
    full = [DTRUN, "--nproc-per-node", str(nproc), *cmd] if nproc > 1 else cmd
    r = subprocess.run(full, capture_output=True, text=True, timeout=300)
    if expect_ok and r.returncode != 0:
        print(r.stdout[-2000:], r.stderr[-4000:])
    return r


def ids_arg(rows):
    return [a for row in rows for a in ("--prompt", ",".join(str(int(t)) for t in row))]


def close(got, want, rtol=1e-5):
    scale = float(np.abs(want).max()) or 1.0
    err = float(np.abs(got - want).max()) / scale
    return err <= rtol, err


def hf_greedy(model, rows, new_tokens):
    """transformers.generate(do_sample=False) on left-padded rows; the new tokens of each."""
    width = max(len(r) for r in rows)
    ids = torch.zeros((len(rows), width), dtype=torch.long)
    mask = torch.zeros_like(ids)
    for b, r in enumerate(rows):
        ids[b, width - len(r):] = torch.tensor(r)
        mask[b, width - len(r):] = 1
    with torch.no_grad():
        out = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=new_tokens, do_sample=False,
                             pad_token_id=0, eos_token_id=None)
    return [list(map(int, out[b, width:])) for b in range(len(rows))]


def check_forward_and_generation(name, folder, ref, vocab, tmp):
    rng = np.random.default_rng(1)
    rows = rng.integers(0, vocab, size=(2, 9)).tolist()
    ragged = [rng.integers(0, vocab, size=n).tolist() for n in (3, 11, 6)]
    with torch.no_grad():
        want = ref(torch.tensor(rows)).logits.numpy()
    greedy = hf_greedy(ref, rows, 8)
    greedy_ragged = hf_greedy(ref, ragged, 6)
    for nproc, flags in LAYOUTS:
        layout = f"{name}, {nproc} process(es) {' '.join(flags)}"
        out = os.path.join(tmp, "logits.safetensors")
        r = run([GENERATE, "--model", folder, *flags, *ids_arg(rows), "--max-new-tokens", "8", "--logits", out,
                 "--json", "--threads", "1"], nproc)
        if r.returncode != 0:
            check(False, f"{layout}: generate ran")
            continue
        got = load_file(out)["logits"]
        ok, err = close(got, want)
        check(ok and got.shape == want.shape, f"{layout}: logits equal transformers' (max rel err {err:.1e})")
        tokens = json.loads(r.stdout.strip().splitlines()[-1])["tokens"]
        check(tokens == greedy, f"{layout}: greedy tokens equal transformers.generate's {greedy} (got {tokens})")
        if nproc <= 2:
            r = run([GENERATE, "--model", folder, *flags, *ids_arg(ragged), "--max-new-tokens", "6", "--json",
                     "--threads", "1"], nproc)
            tokens = json.loads(r.stdout.strip().splitlines()[-1])["tokens"] if r.returncode == 0 else None
            check(tokens == greedy_ragged, f"{layout}: left-padded prompts of 3, 11 and 6 tokens generate "
                                           f"transformers' {greedy_ragged} (got {tokens})")


def torch_losses(folder, rows, steps, lr):
    model = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0)
    ids = torch.tensor(rows)
    losses = []
    for _ in range(steps):
        logits = model(ids[:, :-1]).logits
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1))
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(float(loss))
    return losses


def check_finetune(name, folder, vocab, dtype_on_disk, tmp):
    rng = np.random.default_rng(2)
    rows = rng.integers(0, vocab, size=(3, 10)).tolist()  # 3 rows: an uneven split over dp 2
    steps, lr = 3, 3e-3
    want = torch_losses(folder, rows, steps, lr)
    row_arg = ";".join(",".join(map(str, r)) for r in rows)
    for nproc, flags in [(1, []), (4, ["--dp", "2", "--tp", "2", "--fsdp"])]:
        layout = f"{name}, fine-tune on {nproc} process(es) {' '.join(flags)}"
        export = os.path.join(tmp, f"export-{nproc}")
        logits_file = os.path.join(tmp, f"trained-{nproc}.safetensors")
        r = run([FINETUNE, "--model", folder, "--rows", row_arg, *flags, "--steps", str(steps), "--lr", str(lr),
                 "--export", export, "--export-dtype", "float32", "--shard-bytes", "4000", "--logits", logits_file],
                nproc)
        if r.returncode != 0:
            check(False, f"{layout}: ran")
            continue
        got = [json.loads(line)["loss"] for line in r.stdout.splitlines() if line.startswith("{")]
        diff = max(abs(a - b) / abs(b) for a, b in zip(got, want)) if len(got) == len(want) else float("inf")
        check(diff <= 1e-5, f"{layout}: losses {['%.6f' % x for x in got]} equal PyTorch AdamW's step by step "
                            f"(max rel diff {diff:.1e})")
        check(os.path.exists(os.path.join(export, "model.safetensors.index.json")),
              f"{layout}: the export is sharded with an index")
        back = transformers.AutoModelForCausalLM.from_pretrained(export, dtype=torch.float32).eval()
        with torch.no_grad():
            theirs = back(torch.tensor(rows)).logits.numpy()
        ok, err = close(load_file(logits_file)["logits"], theirs)
        check(ok, f"{layout}: transformers loads the export; its logits equal dtensor's (max rel err {err:.1e})")
    if dtype_on_disk != torch.float32:  # the default export keeps the config's dtype
        export = os.path.join(tmp, "export-own-dtype")
        r = run([FINETUNE, "--model", folder, "--rows", row_arg, "--steps", "1", "--export", export], 1)
        back = transformers.AutoModelForCausalLM.from_pretrained(export) if r.returncode == 0 else None
        got = None if back is None else next(back.parameters()).dtype
        check(got == dtype_on_disk, f"{name}: the default export is {dtype_on_disk} and loads as such (got {got})")


def check_bad_folders(folder, tmp):
    def expect_error(what, mutate, words):
        bad = os.path.join(tmp, "bad")
        shutil.rmtree(bad, ignore_errors=True)
        shutil.copytree(folder, bad)
        mutate(bad)
        r = run([GENERATE, "--model", bad, "--prompt", "1,2", "--max-new-tokens", "1"], 1, expect_ok=False)
        msg = r.stderr.strip().splitlines()[-1] if r.stderr.strip() else ""
        check(r.returncode == 1 and all(w in msg for w in words), f"bad folder, {what}: exit 1 with '{msg}'")

    def edit_config(**changes):
        def mutate(d):
            path = os.path.join(d, "config.json")
            with open(path) as f:
                c = json.load(f)
            c.update(changes)
            with open(path, "w") as f:
                json.dump(c, f)
        return mutate

    def edit_weights(fn):
        def mutate(d):
            path = os.path.join(d, "model.safetensors")
            t = load_file(path)
            fn(t)
            save_file(t, path, metadata={"format": "pt"})
        return mutate

    expect_error("unknown architecture", edit_config(architectures=["GPT2LMHeadModel"], model_type="gpt2"),
                 ["config.json", "GPT2LMHeadModel", "not supported"])
    expect_error("heads that do not divide", edit_config(num_key_value_heads=3),
                 ["config.json", "num_attention_heads 4", "num_key_value_heads 3"])
    expect_error("a missing tensor", edit_weights(lambda t: t.pop("model.layers.1.mlp.up_proj.weight")),
                 ["model.safetensors", "missing", "model.layers.1.mlp.up_proj.weight", "nothing was loaded"])
    expect_error("a tensor the model lacks", edit_weights(lambda t: t.update({"model.extra.weight": t["model.norm.weight"]})),
                 ["model.extra.weight"])
    expect_error("a shape that does not match the config", edit_config(intermediate_size=44),
                 ["model.layers.0.mlp.gate_proj.weight", "[40, 32]", "[44, 32]"])
    expect_error("an integer weight", edit_weights(
        lambda t: t.update({"model.norm.weight": t["model.norm.weight"].astype(np.int32)})),
                 ["model.norm.weight", "i32"])
    expect_error("no weights", lambda d: os.remove(os.path.join(d, "model.safetensors")),
                 ["model.safetensors", "neither"])


def main():
    torch.set_num_threads(1)
    print(f"transformers {transformers.__version__}, torch {torch.__version__}")
    with tempfile.TemporaryDirectory() as tmp:
        first = None
        for name, config, dtype in models():
            folder = os.path.join(tmp, name.replace(" ", "-"))
            ref = make_model(config, dtype, folder)
            first = first or folder
            check_forward_and_generation(name, folder, ref, config.vocab_size, tmp)
            check_finetune(name, folder, config.vocab_size, dtype, tmp)
        check_bad_folders(first, tmp)
    print(f"{len(failures)} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
