"""The PyTorch twin of examples/train_gpt: the same GPT, data, optimizer and tensor-parallel plan, timed per step.

One process (--dp 1 --tp 1, plain `python`), or one process per rank under torchrun (gloo, CPU):

    python torch_gpt.py --json
    torchrun --nproc-per-node 2 torch_gpt.py --dp 1 --tp 2 --threads 1 --json

The model (torchtitan's Llama naming; bench/README.md has the whole definition): tok_embeddings, n_layers pre-norm
blocks (RMSNorm, attention with GPT-NeoX RoPE and an explicit causal softmax, RMSNorm, SwiGLU feed-forward), a final
RMSNorm and an untied output head; f32, no biases; loss = mean cross-entropy of the next token. AdamW(lr, betas
(0.9, 0.95), eps 1e-8, weight decay 0.1), zero_grad(set_to_none) every step, gradients clipped to a global norm of
--clip (1.0, as train_gpt; the benchmark passes 0: no clipping). Batches: token ids uniform in
[0, vocab) from a generator seeded with --seed, a fresh global batch [B, T + 1] per step (inputs and next-token
targets); with dp > 1 each dp rank takes its B/dp rows and gradients are averaged over dp by all_reduce.

Tensor parallelism (no sequence parallelism): tok_embeddings RowwiseParallel(input_layouts=Replicate()), wq/wk/wv
and w1/w3 ColwiseParallel, wo and w2 RowwiseParallel, output ColwiseParallel(output_layouts=Shard(-1),
use_local_output=False) with loss_parallel() around the loss and backward. Attention uses the local head count.

With --json rank 0 prints one line per step, {"step", "loss", "step_s", "tokens_per_s", "peak_bytes"}, where
step_s times zero_grad, forward, loss, backward and the optimizer step (the batch is made before the clock starts) and
peak_bytes is this process's peak RSS (getrusage ru_maxrss; it includes PyTorch's own footprint after import), then
one summary line {"impl": "torch", "params", "threads", "dp", "tp", "peak_bytes_per_rank", "import_rss_bytes"}.
Without --json it prints the same as text. Informational lines go to stderr.
"""
import argparse
import json
import math
import os
import resource
import sys
import time


def rss_bytes():
    """The current resident set size of this process."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def peak_rss_bytes():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--dp", type=int, default=1, help="data-parallel degree (default 1)")
    p.add_argument("--tp", type=int, default=1, help="tensor-parallel degree (default 1)")
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--dim", type=int, default=128)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--vocab", type=int, default=512)
    p.add_argument("--seq", type=int, default=64)
    p.add_argument("--batch", type=int, default=8, help="global batch (sharded over dp)")
    p.add_argument("--hidden", type=int, default=0, help="feed-forward width (default 4 * dim)")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--clip", type=float, default=1.0,
                   help="clip the gradients' global norm to this (train_gpt's default, 1.0); 0: no clipping")
    p.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (default: leave PyTorch's)")
    p.add_argument("--sdpa", action="store_true",
                   help="attention through F.scaled_dot_product_attention(is_causal=True) instead of the explicit "
                        "matmul / masked_fill / softmax / matmul")
    p.add_argument("--json", action="store_true", help="one JSON line per step and a summary line (rank 0)")
    a = p.parse_args(argv)
    if a.hidden == 0:
        a.hidden = 4 * a.dim
    for name in ("dp", "tp", "layers", "dim", "heads", "vocab", "seq", "batch", "hidden", "steps"):
        if getattr(a, name) < 1:
            p.error(f"--{name} must be at least 1, got {getattr(a, name)}")
    if a.dim % a.heads:
        p.error(f"--dim must be a multiple of --heads, got dim {a.dim} and heads {a.heads}")
    if (a.dim // a.heads) % 2:
        p.error(f"the head dim (dim / heads) must be even for RoPE, got {a.dim // a.heads}")
    if a.heads % a.tp:
        p.error(f"--heads must be a multiple of --tp (whole heads per rank), got heads {a.heads} and tp {a.tp}")
    if a.batch % a.dp:
        p.error(f"--batch must be a multiple of --dp, got batch {a.batch} and dp {a.dp}")
    if a.threads < 0:
        p.error(f"--threads must be at least 0, got {a.threads}")
    return a


def build_model(args):
    """The GPT of the module docstring, its weights drawn from --seed (every rank makes the same full model)."""
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    class RMSNorm(nn.Module):
        def __init__(self, dim, eps):
            super().__init__()
            self.eps = eps
            self.weight = nn.Parameter(torch.ones(dim))

        def forward(self, x):
            return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight

    def rotate_half(x):
        half = x.shape[-1] // 2
        return torch.cat((-x[..., half:], x[..., :half]), dim=-1)

    class Attention(nn.Module):
        def __init__(self, dim, heads, seq, theta, sdpa):
            super().__init__()
            self.head_dim = dim // heads
            self.sdpa = sdpa
            self.wq = nn.Linear(dim, dim, bias=False)
            self.wk = nn.Linear(dim, dim, bias=False)
            self.wv = nn.Linear(dim, dim, bias=False)
            self.wo = nn.Linear(dim, dim, bias=False)
            hd = self.head_dim
            inv_freq = theta ** (-torch.arange(0, hd // 2, dtype=torch.float64) * 2 / hd)
            angle = torch.outer(torch.arange(seq, dtype=torch.float64), inv_freq)
            angle = torch.cat((angle, angle), dim=-1)
            self.register_buffer("cos", angle.cos().float(), persistent=False)
            self.register_buffer("sin", angle.sin().float(), persistent=False)
            self.register_buffer("mask", torch.ones(seq, seq, dtype=torch.bool).triu(1), persistent=False)

        def forward(self, x):
            b, t, _ = x.shape
            # -1: the local head count under tensor parallelism (wq/wk/wv are column-sharded by whole heads).
            q = self.wq(x).view(b, t, -1, self.head_dim).transpose(1, 2)
            k = self.wk(x).view(b, t, -1, self.head_dim).transpose(1, 2)
            v = self.wv(x).view(b, t, -1, self.head_dim).transpose(1, 2)
            cos, sin = self.cos[:t], self.sin[:t]
            q = q * cos + rotate_half(q) * sin
            k = k * cos + rotate_half(k) * sin
            if self.sdpa:
                o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            else:
                s = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(self.head_dim)
                s = s.masked_fill(self.mask[:t, :t], float("-inf"))
                o = torch.matmul(torch.softmax(s, dim=-1), v)
            return self.wo(o.transpose(1, 2).reshape(b, t, -1))

    class FeedForward(nn.Module):
        def __init__(self, dim, hidden):
            super().__init__()
            self.w1 = nn.Linear(dim, hidden, bias=False)
            self.w2 = nn.Linear(hidden, dim, bias=False)
            self.w3 = nn.Linear(dim, hidden, bias=False)

        def forward(self, x):
            return self.w2(F.silu(self.w1(x)) * self.w3(x))

    class Block(nn.Module):
        def __init__(self, a):
            super().__init__()
            self.attention_norm = RMSNorm(a.dim, 1e-5)
            self.attention = Attention(a.dim, a.heads, a.seq, 10000.0, a.sdpa)
            self.ffn_norm = RMSNorm(a.dim, 1e-5)
            self.feed_forward = FeedForward(a.dim, a.hidden)

        def forward(self, x):
            h = x + self.attention(self.attention_norm(x))
            return h + self.feed_forward(self.ffn_norm(h))

    class GPT(nn.Module):
        def __init__(self, a):
            super().__init__()
            self.tok_embeddings = nn.Embedding(a.vocab, a.dim)
            self.layers = nn.ModuleList(Block(a) for _ in range(a.layers))
            self.norm = RMSNorm(a.dim, 1e-5)
            self.output = nn.Linear(a.dim, a.vocab, bias=False)

        def forward(self, tokens):
            h = self.tok_embeddings(tokens)
            for layer in self.layers:
                h = layer(h)
            return self.output(self.norm(h))

    torch.manual_seed(args.seed)
    model = GPT(args)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                m.weight.normal_(0.0, 0.02)
    return model


def apply_tp_plan(model, tp_mesh):
    """The tensor-parallel plan of the module docstring on `tp_mesh` (parallelize_module keeps each rank's shard)."""
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    # Every rank made the same full weights from the same seed; parallelize_module keeps its shard of each.
    parallelize_module(model, tp_mesh, {
        "tok_embeddings": RowwiseParallel(input_layouts=Replicate()),
        "output": ColwiseParallel(output_layouts=Shard(-1), use_local_output=False),
    })
    for layer in model.layers:
        parallelize_module(layer, tp_mesh, {
            "attention.wq": ColwiseParallel(),
            "attention.wk": ColwiseParallel(),
            "attention.wv": ColwiseParallel(),
            "attention.wo": RowwiseParallel(),
            "feed_forward.w1": ColwiseParallel(),
            "feed_forward.w2": RowwiseParallel(),
            "feed_forward.w3": ColwiseParallel(),
        })


def main(argv):
    args = parse_args(argv)
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if args.dp * args.tp != world:
        sys.exit(f"torch_gpt.py: dp * tp must equal the number of processes, got dp {args.dp}, tp {args.tp} and "
                 f"{world} process(es) (launch with torchrun --nproc-per-node {args.dp * args.tp})")

    import torch
    import torch.nn.functional as F

    import_rss = rss_bytes()
    if args.threads:
        torch.set_num_threads(args.threads)
    threads = torch.get_num_threads()

    model = build_model(args)
    params = sum(p.numel() for p in model.parameters())

    rank, dp_rank = 0, 0
    dp_group = None
    if world > 1:
        import torch.distributed as dist
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.tensor.parallel import loss_parallel

        dist.init_process_group("gloo")
        rank = dist.get_rank()
        mesh = init_device_mesh("cpu", (args.dp, args.tp), mesh_dim_names=("dp", "tp"))
        dp_rank = mesh["dp"].get_local_rank()
        if args.dp > 1:
            dp_group = mesh["dp"].get_group()
        if args.tp > 1:
            apply_tp_plan(model, mesh["tp"])

    def is_dtensor(t):
        return type(t).__name__ == "DTensor"

    # Under tensor parallelism the norm weights stay plain tensors (replicated by construction: their inputs are
    # replicated) beside the DTensor weights; AdamW takes both in one list.
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)

    def clip_grad_norm(ps, max_norm):
        """torch.nn.utils.clip_grad_norm_ for this plan's mix of sharded DTensor and replicated plain gradients, which
        PyTorch's refuses ("mixed torch.Tensor and DTensor"): the shards' sums of squares are all-reduced over tp."""
        grads = [p.grad for p in ps if p.grad is not None]
        sharded = torch.zeros((), dtype=torch.float64)
        replicated = torch.zeros((), dtype=torch.float64)
        group = None
        for g in grads:
            if is_dtensor(g) and any(pl.is_shard() for pl in g.placements):
                sharded += g.to_local().double().square().sum()
                group = g.device_mesh.get_group()
            else:
                replicated += (g.to_local() if is_dtensor(g) else g).double().square().sum()
        if group is not None:
            dist.all_reduce(sharded, group=group)
        total = (sharded + replicated).sqrt()
        coef = torch.clamp(max_norm / (total + 1e-6), max=1.0).float()
        for g in grads:
            (g.to_local() if is_dtensor(g) else g).mul_(coef)
        return total

    if args.tp > 1:
        loss_context = loss_parallel
    else:
        import contextlib
        loss_context = contextlib.nullcontext

    gen = torch.Generator().manual_seed(args.seed)
    local_batch = args.batch // args.dp
    tokens_per_step = args.batch * args.seq
    info = (f"torch_gpt.py: torch {torch.__version__}, {params} parameters, dp {args.dp} tp {args.tp}, "
            f"{threads} thread(s) per process, batch {args.batch} x seq {args.seq}, "
            f"{'SDPA' if args.sdpa else 'explicit'} attention")
    if rank == 0:
        print(info, file=sys.stderr, flush=True)

    for step in range(1, args.steps + 1):
        data = torch.randint(0, args.vocab, (args.batch, args.seq + 1), generator=gen)
        data = data[dp_rank * local_batch:(dp_rank + 1) * local_batch]
        inputs, targets = data[:, :-1].contiguous(), data[:, 1:].contiguous()
        start = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        logits = model(inputs)
        with loss_context():
            loss = F.cross_entropy(logits.flatten(0, 1), targets.flatten(0, 1))
            loss.backward()
        if dp_group is not None:
            for p in model.parameters():
                g = p.grad.to_local() if is_dtensor(p.grad) else p.grad
                dist.all_reduce(g, group=dp_group)
                g.div_(args.dp)
        if args.clip > 0:
            clip_grad_norm(list(model.parameters()), args.clip)
        optimizer.step()
        step_s = time.perf_counter() - start
        loss_value = (loss.full_tensor() if is_dtensor(loss) else loss).item()
        if dp_group is not None:
            # The global mean (each dp rank's loss is the mean over its own rows).
            lt = torch.tensor([loss_value], dtype=torch.float64)
            dist.all_reduce(lt, group=dp_group)
            loss_value = lt.item() / args.dp
        if not math.isfinite(loss_value):
            sys.exit(f"torch_gpt.py: step {step}: the loss is {loss_value}")
        if rank == 0:
            row = {"step": step, "loss": round(loss_value, 6), "step_s": step_s,
                   "tokens_per_s": tokens_per_step / step_s, "peak_bytes": peak_rss_bytes()}
            if args.json:
                print(json.dumps(row), flush=True)
            else:
                print(f"step {step:4d}  loss {loss_value:.4f}  {step_s * 1e3:8.2f} ms  "
                      f"{row['tokens_per_s']:10.0f} tokens/s  peak RSS {row['peak_bytes'] / 2**20:.0f} MiB", flush=True)

    peaks = [peak_rss_bytes()]
    if world > 1:
        t = torch.tensor([peaks[0]], dtype=torch.int64)
        out = [torch.zeros_like(t) for _ in range(world)]
        dist.all_gather(out, t)
        peaks = [int(x.item()) for x in out]
    if rank == 0:
        summary = {"impl": "torch", "params": params, "threads": threads, "dp": args.dp, "tp": args.tp,
                   "sdpa": args.sdpa, "peak_bytes_per_rank": peaks, "import_rss_bytes": import_rss}
        if args.json:
            print(json.dumps(summary), flush=True)
        else:
            print(f"{params} parameters; peak RSS per rank (MiB): {', '.join(f'{p / 2**20:.0f}' for p in peaks)} "
                  f"(after import torch: {import_rss / 2**20:.0f})", flush=True)
    sys.stdout.flush()
    sys.stderr.flush()
    if world > 1:
        dist.destroy_process_group()
    # Leave without the interpreter's teardown: gloo sometimes aborts there after all work is done
    # (pytorch/pytorch#179291), and tearing down torch's modules raises the peak RSS by 100+ MiB that the benchmark,
    # which measures each rank's peak RSS from outside (bench/train/peak_rss.py), must not count.
    os._exit(0)


if __name__ == "__main__":
    main(sys.argv[1:])
