"""PyTorch's side of bench/fsdp: a residual MLP stack (or bench/train's GPT) trained with FSDP2 on gloo, timed per step.

One process (plain `python`, no launcher): PyTorch eager, --threads intra-op threads. Under torchrun (gloo, CPU):
FSDP2, `fully_shard` per block then the root (reshard_after_forward: the default), the global batch split over dp;
with --tp T > 1 a (dp, tp) `init_device_mesh`, `parallelize_module` on mesh["tp"] first, then `fully_shard(...,
mesh=mesh["dp"])`:

    python torch_fsdp.py --model mlp --batch 8 --threads 2 --json
    torchrun --nproc-per-node 2 torch_fsdp.py --model mlp --batch 8 --dp 2 --json
    torchrun --nproc-per-node 4 torch_fsdp.py --model mlp --batch 8 --dp 2 --tp 2 --json

--model mlp (defaults: 4 layers, dim 512, hidden 4 * dim, batch 2, seq 128): x [B, T, D] f32 drawn from N(0, 1) by a
generator seeded with (seed, step); per block `x = x + fc2(gelu(fc1(norm(x))))` with LayerNorm(D), Linear(D, hidden),
GELU (erf), Linear(hidden, D), biases on; loss = mean of x_final ** 2 over all elements. TP plan: fc1
ColwiseParallel, fc2 RowwiseParallel (the norms stay replicated). Parameter names: layers.{i}.{norm,fc1,fc2}.
--model gpt: bench/train/torch_gpt.py's model, data, loss and TP plan (its flags --heads --vocab --sdpa apply;
defaults as there: 2 layers, dim 128, batch 8, seq 64).
Weights: Linear and Embedding normal(0, 0.02), biases zeros, norms ones (as dtensor's modules). AdamW(lr 1e-3, betas
(0.9, 0.95), eps 1e-8, weight_decay 0.1), zero_grad(set_to_none) every step. Each dp rank computes the mean loss of
its B / dp rows and FSDP2 averages the gradients over dp: the gradient of the global mean.

With --json rank 0 prints per step {"step", "loss" (the global mean), "step_s", "rss_base_bytes", "rss_peak_bytes"}:
step_s times zero_grad, forward, loss, backward and the optimizer step (the batch is made before the clock starts);
rss_base is the process's RSS just before the model is built (after import torch and the process group), rss_peak
is getrusage's ru_maxrss; the harness reports peak - base as the memory "above the footprint". Then one summary line
{"impl": "torch"|"torch-fsdp2", "params", "threads", "dp", "tp", "rss_base_bytes_per_rank",
"rss_peak_bytes_per_rank"}. Without --json the same as text. Informational lines go to stderr.
"""
import argparse
import json
import math
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "train"))
import torch_gpt  # noqa: E402  (bench/train/torch_gpt.py: the GPT, its TP plan, the RSS readers)
from torch_gpt import peak_rss_bytes, rss_bytes  # noqa: E402

MODEL_DEFAULTS = {
    "mlp": {"layers": 4, "dim": 512, "batch": 2, "seq": 128},
    "gpt": {"layers": 2, "dim": 128, "batch": 8, "seq": 64},
}


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", choices=("mlp", "gpt"), default="mlp")
    p.add_argument("--dp", type=int, default=1, help="data-parallel (FSDP) degree")
    p.add_argument("--tp", type=int, default=1, help="tensor-parallel degree")
    p.add_argument("--layers", type=int)
    p.add_argument("--dim", type=int)
    p.add_argument("--hidden", type=int, default=0, help="the blocks' hidden width (default 4 * dim)")
    p.add_argument("--batch", type=int, help="global batch (split over dp)")
    p.add_argument("--seq", type=int)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (default: leave PyTorch's)")
    p.add_argument("--heads", type=int, default=4, help="gpt: attention heads")
    p.add_argument("--vocab", type=int, default=512, help="gpt: vocabulary")
    p.add_argument("--sdpa", action="store_true", help="gpt: attention through F.scaled_dot_product_attention")
    p.add_argument("--json", action="store_true", help="one JSON line per step and a summary line (rank 0)")
    a = p.parse_args(argv)
    for k, v in MODEL_DEFAULTS[a.model].items():
        if getattr(a, k) is None:
            setattr(a, k, v)
    if a.hidden == 0:
        a.hidden = 4 * a.dim
    for name in ("dp", "tp", "layers", "dim", "hidden", "batch", "seq", "steps", "heads", "vocab"):
        if getattr(a, name) < 1:
            p.error(f"--{name} must be at least 1, got {getattr(a, name)}")
    if a.batch % a.dp:
        p.error(f"--batch must be a multiple of --dp (the same rows per rank), got batch {a.batch} and dp {a.dp}")
    if a.threads < 0:
        p.error(f"--threads must be at least 0, got {a.threads}")
    if a.model == "gpt" and (a.dim % a.heads or (a.dim // a.heads) % 2 or a.heads % a.tp):
        p.error(f"gpt: dim must be a multiple of heads with an even head dim, and heads a multiple of tp; got dim "
                f"{a.dim}, heads {a.heads}, tp {a.tp}")
    if a.model == "mlp" and a.hidden % a.tp:
        p.error(f"mlp: --hidden must be a multiple of --tp, got hidden {a.hidden} and tp {a.tp}")
    return a


def build_mlp(args):
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    class Block(nn.Module):
        def __init__(self, dim, hidden):
            super().__init__()
            self.norm = nn.LayerNorm(dim)
            self.fc1 = nn.Linear(dim, hidden)
            self.fc2 = nn.Linear(hidden, dim)

        def forward(self, x):
            return x + self.fc2(F.gelu(self.fc1(self.norm(x))))

    class Mlp(nn.Module):
        def __init__(self, a):
            super().__init__()
            self.layers = nn.ModuleList(Block(a.dim, a.hidden) for _ in range(a.layers))

        def forward(self, x):
            for layer in self.layers:
                x = layer(x)
            return x

    torch.manual_seed(args.seed)
    model = Mlp(args)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.Linear):
                m.weight.normal_(0.0, 0.02)
                m.bias.zero_()
    return model


def main(argv):
    args = parse_args(argv)
    world = int(os.environ.get("WORLD_SIZE", "1"))
    launched = "RANK" in os.environ
    if args.dp * args.tp != world:
        sys.exit(f"torch_fsdp.py: dp * tp must equal the number of processes, got dp {args.dp}, tp {args.tp} and "
                 f"{world} process(es) (launch with torchrun --nproc-per-node {args.dp * args.tp})")

    import torch
    import torch.nn.functional as F

    if args.threads:
        torch.set_num_threads(args.threads)
    threads = torch.get_num_threads()

    rank, dp_rank = 0, 0
    mesh = None
    if launched:
        import torch.distributed as dist
        from torch.distributed.device_mesh import init_device_mesh

        dist.init_process_group("gloo")
        rank = dist.get_rank()
        mesh = init_device_mesh("cpu", (args.dp, args.tp), mesh_dim_names=("dp", "tp"))
        dp_rank = mesh["dp"].get_local_rank()

    rss_base = rss_bytes()
    model = build_mlp(args) if args.model == "mlp" else torch_gpt.build_model(args)
    params = sum(p.numel() for p in model.parameters())
    if mesh is not None:
        from torch.distributed.fsdp import fully_shard

        if args.tp > 1:
            if args.model == "mlp":
                from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

                for layer in model.layers:
                    parallelize_module(layer, mesh["tp"], {"fc1": ColwiseParallel(), "fc2": RowwiseParallel()})
            else:
                torch_gpt.apply_tp_plan(model, mesh["tp"])
        for layer in model.layers:
            fully_shard(layer, mesh=mesh["dp"])
        fully_shard(model, mesh=mesh["dp"])
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)

    if args.model == "gpt" and args.tp > 1:
        from torch.distributed.tensor.parallel import loss_parallel as loss_context
    else:
        import contextlib
        loss_context = contextlib.nullcontext

    local_batch = args.batch // args.dp
    rows = slice(dp_rank * local_batch, (dp_rank + 1) * local_batch)
    gpt_gen = torch.Generator().manual_seed(args.seed)
    impl = "torch-fsdp2" if mesh is not None else "torch"
    if rank == 0:
        print(f"torch_fsdp.py: torch {torch.__version__}, {impl}, model {args.model} ({args.layers} layers, dim "
              f"{args.dim}, hidden {args.hidden}), {params} parameters, dp {args.dp} tp {args.tp}, {threads} "
              f"thread(s) per process, batch {args.batch} x seq {args.seq}", file=sys.stderr, flush=True)

    for step in range(1, args.steps + 1):
        # The global batch, then this dp rank's rows of it (tp ranks of one dp rank take the same rows).
        if args.model == "mlp":
            gen = torch.Generator().manual_seed(args.seed * 1000003 + step)
            inputs = torch.randn(args.batch, args.seq, args.dim, generator=gen)[rows].contiguous()
        else:
            data = torch.randint(0, args.vocab, (args.batch, args.seq + 1), generator=gpt_gen)[rows]
            inputs, targets = data[:, :-1].contiguous(), data[:, 1:].contiguous()
        start = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        out = model(inputs)
        with loss_context():
            if args.model == "mlp":
                loss = out.pow(2).mean()
            else:
                loss = F.cross_entropy(out.flatten(0, 1), targets.flatten(0, 1))
            loss.backward()
        optimizer.step()
        step_s = time.perf_counter() - start
        loss_value = (loss.full_tensor() if type(loss).__name__ == "DTensor" else loss).item()
        if args.dp > 1:
            # The global mean: each dp rank's loss is the mean over its own (equally many) rows.
            lt = torch.tensor([loss_value], dtype=torch.float64)
            dist.all_reduce(lt, group=mesh["dp"].get_group())
            loss_value = lt.item() / args.dp
        if not math.isfinite(loss_value):
            sys.exit(f"torch_fsdp.py: step {step}: the loss is {loss_value}")
        if rank == 0:
            row = {"step": step, "loss": round(loss_value, 8), "step_s": step_s, "rss_base_bytes": rss_base,
                   "rss_peak_bytes": peak_rss_bytes()}
            if args.json:
                print(json.dumps(row), flush=True)
            else:
                print(f"step {step:4d}  loss {loss_value:.6f}  {step_s * 1e3:8.2f} ms  peak RSS above the footprint "
                      f"{(row['rss_peak_bytes'] - rss_base) / 2**20:.0f} MiB", flush=True)

    bases, peaks = [rss_base], [peak_rss_bytes()]
    if launched:
        t = torch.tensor([rss_base, peaks[0]], dtype=torch.int64)
        out = [torch.zeros_like(t) for _ in range(world)]
        dist.all_gather(out, t)
        bases, peaks = [int(x[0]) for x in out], [int(x[1]) for x in out]
    if rank == 0:
        summary = {"impl": impl, "model": args.model, "params": params, "threads": threads, "dp": args.dp,
                   "tp": args.tp, "rss_base_bytes_per_rank": bases, "rss_peak_bytes_per_rank": peaks}
        if args.json:
            print(json.dumps(summary), flush=True)
        else:
            print(f"{params} parameters; peak RSS above the footprint per rank (MiB): "
                  f"{', '.join(f'{(p - b) / 2**20:.0f}' for p, b in zip(peaks, bases))} (footprints: "
                  f"{', '.join(f'{b / 2**20:.0f}' for b in bases)})", flush=True)
    sys.stdout.flush()
    sys.stderr.flush()
    if launched:
        dist.destroy_process_group()
    # gloo sometimes aborts in the interpreter's teardown after all work is done (pytorch/pytorch#179291).
    os._exit(0)


if __name__ == "__main__":
    main(sys.argv[1:])
