"""The PyTorch twin of dttrain's recipe (tools/dttrain.cc): the same Llama, data file, optimizer, schedule and FSDP,
on gloo, timed per step. Run under torchrun, one process per dp rank:

    torchrun --nproc-per-node 2 torch_llama.py --data kjv.bin --dim 512 --layers 8 --heads 8 --kv-heads 4 \
        --hidden 1408 --vocab 8192 --seq 256 --global-batch 8 --steps 6 --warmup 2 --threads 1

The model is bench/train/torch_gpt.py's (torchtitan's Llama naming: tok_embeddings, layers.i.attention.{wq,wk,wv,wo},
layers.i.feed_forward.{w1,w2,w3}, attention_norm, ffn_norm, norm, untied output; RMSNorm eps 1e-5, SwiGLU of width
--hidden, GPT-NeoX rotate-half RoPE with theta 10000, no biases, norms ones), with its attention through
F.scaled_dot_product_attention(is_causal=True) and grouped-query attention: wk and wv project to --kv-heads heads,
each repeated for its heads / kv_heads query heads (torchtitan's repeat_kv). Weights as dttrain's (Note [Gpt
initialization] in nn/models/gpt.cc): every Linear and Embedding weight ~ Normal(0, --init-std) truncated at
+-(--init-cutoff) std (0: not truncated), the output projections of block l (attention.wo, feed_forward.w2) with
their std divided by sqrt(2 (l + 1)) (--init-depth depth), by sqrt(2 layers) (layers) or not (none).

FSDP2: fully_shard per block, then the root, on a 1-d mesh of the dp ranks (reshard after forward: the default).
--param-dtype bf16: MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=f32), the root's output (the logits) in f32,
as dttrain's mixed_precision.param_dtype = "bf16" with reduce_dtype = "f32" (the RoPE tables in the compute dtype,
as dttrain makes them). AdamW (betas (0.9, 0.95), eps 1e-8, PyTorch's CPU default: neither fused nor foreach) over
dttrain's parameter groups: weight decay 0.1 on the matrices, none on the norms and the embedding table.
clip_grad_norm_ to --max-norm (0: off), the lr of dttrain's warmup + cosine schedule (train/lr_schedule.cc, min lr 0)
through LambdaLR. Each step: --grad-accum micro-batches of global_batch / grad_accum rows, this rank's share of each
(set_requires_gradient_sync(False) but on the last micro-batch), each micro-batch's mean loss divided by grad_accum;
FSDP2 averages the gradients over dp: the gradient of the mean over the whole global batch, as dttrain's.

Data: the token file of tools/prepare_tokens.py (--data PATH.bin with PATH.json beside: dtype uint16 or uint32, tokens,
vocab_size; train/token_dataset.h), read through np.memmap. Row r of step s is a window of seq + 1 tokens at a
random offset drawn from a generator seeded with (--seed, s); inputs are its first seq tokens, targets the last seq
(dttrain visits seq-strided windows in a seeded permutation: the order differs, the shapes and the file do not).

Rank 0 prints JSON lines on stdout. First {"impl": "torch-fsdp2", "params", "peak_flops", "flops_per_token",
"threads", "ranks", "param_dtype", "torch"}: peak_flops is this rank's best of 3 f32 1024^3 torch.mm at the
training's thread count and flops_per_token 6 * (params - vocab * dim) + 12 * layers * heads * head_dim * seq,
dttrain's figures for its MFU (PaLM's model FLOPs, as torchtitan counts them: the untied embedding table is looked
up, not multiplied). Then per step {"step", "loss" (the global mean), "grad_norm", "lr", "step_s", "tokens_per_s",
"mfu", "rss_peak_bytes"}: step_s times reading the batch, zero_grad, forward, loss, backward, clipping, the
optimizer and the loss's all-reduce (dttrain's step time covers the same), mfu = flops_per_token * tokens_per_s /
ranks / peak_flops. Last {"impl", "rss_base_bytes_per_rank", "rss_peak_bytes_per_rank"}: each rank's RSS before the
model is built (after import torch and the process group) and its ru_maxrss. A text summary goes to stderr.
"""
import argparse
import json
import math
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "train"))
import torch_gpt  # noqa: E402  (bench/train/torch_gpt.py: the Llama blocks and the RSS readers)
from torch_gpt import peak_rss_bytes, rss_bytes  # noqa: E402


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--data", required=True, help="the token file, PATH.bin (PATH.json beside it)")
    p.add_argument("--dim", type=int, default=128)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--kv-heads", type=int, default=0, help="key/value heads (0: --heads)")
    p.add_argument("--hidden", type=int, default=0, help="SwiGLU width (0: 4 * dim)")
    p.add_argument("--vocab", type=int, default=512)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--global-batch", type=int, default=8, help="rows per step over all dp ranks")
    p.add_argument("--grad-accum", type=int, default=1, help="micro-batches per step")
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--lr", type=float, default=3e-4, help="peak learning rate")
    p.add_argument("--warmup", type=int, default=0, help="linear lr warmup steps, then cosine to 0")
    p.add_argument("--max-norm", type=float, default=1.0, help="gradient clipping (0: off)")
    p.add_argument("--param-dtype", choices=("f32", "bf16"), default="f32", help="FSDP's compute dtype")
    p.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (0: cores / local ranks)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--init-std", type=float, default=0.02, help="std of the weights (dttrain's model.init_std)")
    p.add_argument("--init-cutoff", type=float, default=2.0, help="truncation in std units (0: none)")
    p.add_argument("--init-depth", choices=("none", "depth", "layers"), default="depth",
                   help="the residual output projections' std scaling (dttrain's model.init_depth)")
    a = p.parse_args(argv)
    a.kv_heads = a.kv_heads or a.heads
    a.hidden = a.hidden or 4 * a.dim
    for name in ("dim", "layers", "heads", "kv_heads", "hidden", "vocab", "seq", "global_batch", "grad_accum",
                 "steps"):
        if getattr(a, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be at least 1, got {getattr(a, name)}")
    if a.dim % a.heads or (a.dim // a.heads) % 2 or a.heads % a.kv_heads:
        p.error(f"dim must be a multiple of heads with an even head dim, and heads a multiple of kv_heads; got dim "
                f"{a.dim}, heads {a.heads}, kv_heads {a.kv_heads}")
    if a.threads < 0 or a.warmup < 0 or a.max_norm < 0 or a.init_std < 0 or a.init_cutoff < 0:
        p.error("--threads, --warmup, --max-norm, --init-std and --init-cutoff must be at least 0")
    return a


def lr_factor(step, warmup, total):
    """dttrain's warmup + cosine schedule (train/lr_schedule.cc, min lr 0) at 0-based step, as a factor of the peak."""
    if warmup > 0 and step < warmup:
        return (step + 1) / warmup
    t = min(max((step - warmup) / max(1, total - warmup), 0.0), 1.0)
    return 0.5 * (1 + math.cos(math.pi * t))


def open_tokens(path, np):
    """The token file as a memmap, and its header (train/token_dataset.h)."""
    stem = path[:-len(".bin")] if path.endswith(".bin") else path
    with open(stem + ".json") as f:
        header = json.load(f)
    dtype = {"uint16": np.uint16, "uint32": np.uint32}[header["dtype"]]
    tokens = np.memmap(stem + ".bin", dtype=dtype, mode="r")
    if len(tokens) != header["tokens"]:
        sys.exit(f"torch_llama.py: {stem}.bin holds {len(tokens)} ids, its header says {header['tokens']}")
    return tokens, header


def build_model(a, param_dtype):
    """torch_gpt's Llama with grouped-query attention and SDPA (see the module docstring)."""
    import torch
    import torch.nn as nn

    groups, head_dim = a.heads // a.kv_heads, a.dim // a.heads

    class KvLinear(nn.Linear):
        """wk / wv of kv_heads heads; the output repeats each head for its `groups` query heads (torchtitan's
        repeat_kv), so that torch_gpt's attention sees as many key/value heads as query heads."""

        def forward(self, x):
            y = super().forward(x)
            if groups == 1:
                return y
            b, t, _ = y.shape
            return y.view(b, t, a.kv_heads, 1, head_dim).expand(b, t, a.kv_heads, groups, head_dim).reshape(b, t, -1)

    def init(weight, std):
        if a.init_cutoff > 0:
            nn.init.trunc_normal_(weight, 0.0, std, -a.init_cutoff * std, a.init_cutoff * std)
        else:
            nn.init.normal_(weight, 0.0, std)

    model = torch_gpt.build_model(argparse.Namespace(vocab=a.vocab, dim=a.dim, layers=a.layers, heads=a.heads,
                                                     seq=a.seq, hidden=a.hidden, sdpa=True, seed=a.seed))
    with torch.no_grad():
        for layer in model.layers:
            att = layer.attention
            att.wk = KvLinear(a.dim, a.kv_heads * head_dim, bias=False)
            att.wv = KvLinear(a.dim, a.kv_heads * head_dim, bias=False)
            att.cos, att.sin = att.cos.to(param_dtype), att.sin.to(param_dtype)
        for m in model.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                init(m.weight, a.init_std)
        for l, layer in enumerate(model.layers):
            std = a.init_std / {"none": 1.0, "depth": math.sqrt(2 * (l + 1)), "layers": math.sqrt(2 * a.layers)}[
                a.init_depth]
            init(layer.attention.wo.weight, std)
            init(layer.feed_forward.w2.weight, std)
    return model


def measured_peak_flops(torch):
    """This rank's FLOP/s on a 1024^3 f32 matmul, best of 3 (dttrain's measured_peak_flops)."""
    n = 1024
    x, y = torch.randn(n, n), torch.randn(n, n)
    best = math.inf
    for _ in range(3):
        start = time.perf_counter()
        torch.mm(x, y)
        best = min(best, time.perf_counter() - start)
    return 2.0 * n ** 3 / best


def main(argv):
    a = parse_args(argv)
    if "RANK" not in os.environ:
        sys.exit("torch_llama.py: run it under torchrun (torchrun --nproc-per-node N torch_llama.py ...)")
    world = int(os.environ["WORLD_SIZE"])
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", world))
    if a.global_batch % (a.grad_accum * world):
        sys.exit(f"torch_llama.py: --global-batch {a.global_batch} must be a multiple of --grad-accum {a.grad_accum} "
                 f"x {world} ranks (equal shares)")

    import numpy as np
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    threads = a.threads or max(1, (os.cpu_count() or 1) // local_world)
    torch.set_num_threads(threads)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    mesh = init_device_mesh("cpu", (world,), mesh_dim_names=("dp",))
    tokens, header = open_tokens(a.data, np)
    if header["vocab_size"] > a.vocab:
        sys.exit(f"torch_llama.py: {a.data} has a vocabulary of {header['vocab_size']}, more than the model's "
                 f"{a.vocab}")
    if len(tokens) < a.seq + 1:
        sys.exit(f"torch_llama.py: {a.data} holds {len(tokens)} tokens, fewer than one window of {a.seq + 1}")

    rss_base = rss_bytes()
    param_dtype = torch.bfloat16 if a.param_dtype == "bf16" else torch.float32
    model = build_model(a, param_dtype)
    params = sum(p.numel() for p in model.parameters())
    if a.param_dtype == "bf16":
        block_mp = MixedPrecisionPolicy(param_dtype=param_dtype, reduce_dtype=torch.float32)
        root_mp = MixedPrecisionPolicy(param_dtype=param_dtype, reduce_dtype=torch.float32,
                                       output_dtype=torch.float32)
    else:
        block_mp = root_mp = MixedPrecisionPolicy()
    for layer in model.layers:
        fully_shard(layer, mesh=mesh, mp_policy=block_mp)
    fully_shard(model, mesh=mesh, mp_policy=root_mp)

    # dttrain's groups (train/param_groups.cc): no decay on norm weights and the embedding table.
    no_decay = {id(m.weight) for m in model.modules()
                if isinstance(m, torch.nn.Embedding) or type(m).__name__ == "RMSNorm"}
    groups = [{"params": [p for p in model.parameters() if id(p) not in no_decay], "weight_decay": 0.1},
              {"params": [p for p in model.parameters() if id(p) in no_decay], "weight_decay": 0.0}]
    optimizer = torch.optim.AdamW(groups, lr=a.lr, betas=(0.9, 0.95), eps=1e-8)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: lr_factor(s, a.warmup, a.steps))

    peak = measured_peak_flops(torch)
    flops_per_token = 6.0 * (params - a.vocab * a.dim) + 12.0 * a.layers * a.dim * a.seq  # heads * head_dim = dim
    tokens_per_step = a.global_batch * a.seq
    micro_rows = a.global_batch // a.grad_accum
    mine = micro_rows // world
    if rank == 0:
        print(json.dumps({"impl": "torch-fsdp2", "params": params, "peak_flops": peak,
                          "flops_per_token": flops_per_token, "threads": threads, "ranks": world,
                          "param_dtype": a.param_dtype, "torch": torch.__version__}), flush=True)
        print(f"torch_llama.py: torch {torch.__version__}, {params} parameters, FSDP2 on {world} rank(s) (gloo), "
              f"{a.param_dtype}, {threads} thread(s) per rank, batch {a.global_batch} x seq {a.seq} "
              f"(grad_accum {a.grad_accum}), {len(tokens)} tokens in {a.data}, peak {peak / 1e9:.1f} GFLOP/s per rank",
              file=sys.stderr, flush=True)

    for step in range(1, a.steps + 1):
        start = time.perf_counter()
        rng = np.random.default_rng([a.seed, step])
        offsets = rng.integers(0, len(tokens) - a.seq, size=a.global_batch)
        optimizer.zero_grad(set_to_none=True)
        local_loss = torch.zeros((), dtype=torch.float64)
        for m in range(a.grad_accum):
            first = m * micro_rows + rank * mine
            rows = torch.from_numpy(np.stack([tokens[o:o + a.seq + 1] for o in offsets[first:first + mine]])
                                    .astype(np.int64))
            model.set_requires_gradient_sync(m == a.grad_accum - 1)
            logits = model(rows[:, :-1])
            loss = F.cross_entropy(logits.flatten(0, 1).float(), rows[:, 1:].flatten()) / a.grad_accum
            loss.backward()
            local_loss += loss.detach().double()
        if a.max_norm > 0:
            norm = torch.nn.utils.clip_grad_norm_(model.parameters(), a.max_norm)
            norm = (norm.full_tensor() if hasattr(norm, "full_tensor") else norm).item()
        else:
            norm = None
        lr = optimizer.param_groups[0]["lr"]
        optimizer.step()
        schedule.step()
        dist.all_reduce(local_loss)
        loss_value = local_loss.item() / world
        step_s = time.perf_counter() - start
        if not math.isfinite(loss_value):
            sys.exit(f"torch_llama.py: step {step}: the loss is {loss_value}")
        if rank == 0:
            tps = tokens_per_step / step_s
            print(json.dumps({"step": step, "loss": loss_value, "grad_norm": norm, "lr": lr, "step_s": step_s,
                              "tokens_per_s": tps, "mfu": tps * flops_per_token / world / peak,
                              "rss_peak_bytes": peak_rss_bytes()}), flush=True)

    t = torch.tensor([rss_base, peak_rss_bytes()], dtype=torch.int64)
    out = [torch.zeros_like(t) for _ in range(world)]
    dist.all_gather(out, t)
    if rank == 0:
        bases, peaks = [int(x[0]) for x in out], [int(x[1]) for x in out]
        print(json.dumps({"impl": "torch-fsdp2", "rss_base_bytes_per_rank": bases, "rss_peak_bytes_per_rank": peaks}),
              flush=True)
        print(f"torch_llama.py: peak RSS per rank (MiB) {', '.join(f'{p / 2**20:.0f}' for p in peaks)}, of which "
              f"before the model {', '.join(f'{b / 2**20:.0f}' for b in bases)}", file=sys.stderr, flush=True)
    sys.stdout.flush()
    sys.stderr.flush()
    dist.destroy_process_group()
    # gloo sometimes aborts in the interpreter's teardown after all work is done (pytorch/pytorch#179291).
    os._exit(0)


if __name__ == "__main__":
    main(sys.argv[1:])
