"""One side of bench/torch_front: bench/fsdp's models in plain PyTorch, sharded by PyTorch FSDP2 (torchrun, gloo) or
by dtensor.torch (dtrun), with the same code: only the imports differ (--impl).

    torchrun --nproc-per-node 2 train_step.py --impl torch --model mlp --batch 2 --json
    dtrun --nproc-per-node 2 python3 train_step.py --impl dtensor --model mlp --batch 2 --json
    python3 train_step.py --impl plain --model tiny --batch 1 --json      # one process, no sharding
    python3 train_step.py --impl hooks --model tiny --batch 1 --paired --json   # PyTorch's hook floor

--impl hooks (tiny, one process, no sharding): the hooks a sharded block needs from PyTorch, with bodies that do
nothing (install_empty_hooks): what PyTorch's hook machinery alone costs per block, the floor under any FSDP built on
its hooks (dtensor.torch's and FSDP2's alike).

--model mlp and gpt: bench/fsdp/torch_fsdp.py's models and data (its flags --layers --dim --seq apply; its
defaults). --model tiny: --layers (default 100) blocks of Linear(16, 16) + tanh on a (batch, 16) input: the step is
the hooks' overhead. Each rank takes its rows of the global batch; fully_shard per block, then the root; AdamW; the
loss is reduced over the ranks with the collectives of the same import. With --json rank 0 prints per step {"step",
"loss", "step_s", "rss_base_bytes", "rss_peak_bytes"} (with --paired also "plain_step_s": the same step of an
unsharded copy in the same process) and a summary {"impl", "model", "params", "rss_base_bytes_per_rank",
"rss_peak_bytes_per_rank"} (as bench/fsdp's programs).
"""
import argparse
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "fsdp"))
sys.path.insert(0, os.path.join(HERE, "..", "train"))
sys.path.insert(0, os.path.join(HERE, "..", "..", "bindings", "python"))  # a source tree without pip install


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--impl", choices=("torch", "dtensor", "plain", "hooks"), required=True)
    p.add_argument("--model", choices=("mlp", "gpt", "tiny"), default="mlp")
    p.add_argument("--batch", type=int)
    p.add_argument("--layers", type=int)
    p.add_argument("--dim", type=int)
    p.add_argument("--seq", type=int)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--json", action="store_true")
    p.add_argument("--paired", action="store_true",
                   help="tiny on 1 process: also a plain (unsharded) copy, timed in the same process, alternating")
    a = p.parse_args(argv)
    defaults = {"tiny": {"layers": 100, "dim": 16, "batch": 2, "seq": 1}}.get(a.model, {})
    for k, v in defaults.items():
        if getattr(a, k) is None:
            setattr(a, k, v)
    return a


def build(args):
    import torch
    import torch.nn as nn
    import torch_fsdp
    import torch_gpt
    if args.model == "tiny":
        class Tiny(nn.Module):
            def __init__(self):
                super().__init__()
                self.fc = nn.Linear(args.dim, args.dim)
                self.output_hook = None  # --impl hooks

            def forward(self, x):
                y = torch.tanh(self.fc(x))
                if self.output_hook is not None:  # on the output's node, as fully_shard's
                    y.grad_fn.register_prehook(self.output_hook)
                return y

        class Stack(nn.Module):
            def __init__(self):
                super().__init__()
                self.layers = nn.ModuleList(Tiny() for _ in range(args.layers))

            def forward(self, x):
                for layer in self.layers:
                    x = layer(x)
                return x
        torch.manual_seed(0)
        return Stack()
    # bench/fsdp's model arguments, with its defaults for what is not given here.
    fsdp_argv = ["--model", args.model] + [f"--{k}={getattr(args, k)}" for k in ("layers", "dim", "seq", "batch")
                                            if getattr(args, k) is not None]
    margs = torch_fsdp.parse_args(fsdp_argv)
    for k in ("layers", "dim", "seq", "batch"):
        setattr(args, k, getattr(margs, k))
    args.margs = margs
    return torch_fsdp.build_mlp(margs) if args.model == "mlp" else torch_gpt.build_model(margs)


def install_empty_hooks(model):
    """--impl hooks: the hooks dtensor.torch's fully_shard gives a tiny block through PyTorch's Python API, with
    bodies that do nothing: a hook on each block's output (the pre-backward gather) and a post-accumulate-grad hook on
    each parameter (the gradient hand-off). Both are a C function (a zero-length deque's append: one argument, returns
    None)."""
    import collections

    sink = collections.deque(maxlen=0).append
    for layer in model.layers:
        layer.output_hook = sink
    for p in model.parameters():
        p.register_post_accumulate_grad_hook(sink)


def main(argv):
    args = parse_args(argv)
    import torch
    import torch.nn.functional as F
    from torch_gpt import peak_rss_bytes, rss_bytes

    if args.impl == "torch":
        import torch.distributed as dist
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard
    elif args.impl == "dtensor":
        from dtensor.torch import distributed as dist
        from dtensor.torch import fully_shard, init_device_mesh
    torch.set_num_threads(args.threads)
    world, rank, mesh = 1, 0, None
    if args.impl not in ("plain", "hooks"):
        dist.init_process_group("gloo")
        world, rank = dist.get_world_size(), dist.get_rank()
        mesh = init_device_mesh("cpu", (world,), mesh_dim_names=("dp",))
    # The footprint includes PyTorch's lazy imports: torch.optim's first step imports torch._dynamo (about
    # 130 MB of modules), which FSDP2 imports with fully_shard and dtensor.torch does not: imported here on both
    # sides, before the footprint is read, so that "above the footprint" compares tensors, not modules.
    import torch._dynamo  # noqa: F401
    import torch.distributed.tensor  # noqa: F401
    rss_base = rss_bytes()
    model = build(args)
    params = sum(p.numel() for p in model.parameters())
    if mesh is not None:
        for layer in model.layers:
            fully_shard(layer, mesh=mesh)
        fully_shard(model, mesh=mesh)
    if args.impl == "hooks":
        if args.model != "tiny":
            sys.exit("train_step.py: --impl hooks is for --model tiny")
        install_empty_hooks(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)
    plain = None
    if args.paired:  # the per-block overhead without the scatter between processes: both models in this one
        if args.model != "tiny" or world != 1:
            sys.exit("train_step.py: --paired is for --model tiny on 1 process")
        plain = build(args)
        plain_opt = torch.optim.AdamW(plain.parameters(), lr=1e-3, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)
    rows = args.batch // world if mesh is not None else args.batch
    mine = slice(rank * rows, (rank + 1) * rows) if mesh is not None else slice(0, rows)
    gpt_gen = torch.Generator().manual_seed(0)
    for step in range(1, args.steps + 1):
        if args.model == "gpt":
            m = args.margs
            data = torch.randint(0, m.vocab, (args.batch, m.seq + 1), generator=gpt_gen)[mine]
            inputs, targets = data[:, :-1].contiguous(), data[:, 1:].contiguous()
        else:
            gen = torch.Generator().manual_seed(1000003 + step)
            shape = (args.batch, args.seq, args.dim) if args.model == "mlp" else (args.batch, args.dim)
            inputs = torch.randn(*shape, generator=gen)[mine].contiguous()
        def one_step(model, optimizer):
            start = time.perf_counter()
            optimizer.zero_grad(set_to_none=True)
            out = model(inputs)
            if args.model == "gpt":
                loss = F.cross_entropy(out.flatten(0, 1), targets.flatten(0, 1))
            else:
                loss = out.pow(2).mean()
            loss.backward()
            optimizer.step()
            return loss, time.perf_counter() - start

        plain_s = None
        if plain is not None and step % 2:  # the order alternates from step to step
            plain_s = one_step(plain, plain_opt)[1]
        loss, step_s = one_step(model, optimizer)
        if plain is not None and plain_s is None:
            plain_s = one_step(plain, plain_opt)[1]
        lt = torch.tensor([loss.item()], dtype=torch.float64)
        if mesh is not None:
            dist.all_reduce(lt, group=mesh.get_group("dp"))
            lt /= world
        if rank == 0:
            row = {"step": step, "loss": round(lt.item(), 8), "step_s": step_s, "rss_base_bytes": rss_base,
                   "rss_peak_bytes": peak_rss_bytes()}
            if plain_s is not None:
                row["plain_step_s"] = plain_s
            print(json.dumps(row) if args.json else f"step {step}  loss {row['loss']:.6f}  {step_s * 1e3:.2f} ms",
                  flush=True)
    t = torch.tensor([rss_base, peak_rss_bytes()], dtype=torch.int64)
    both = torch.zeros(2 * world, dtype=torch.int64)
    if mesh is not None:
        dist.all_gather_into_tensor(both, t, group=mesh.get_group("dp"))
    else:
        both = t
    if rank == 0:
        summary = {"impl": {"torch": "torch-fsdp2", "dtensor": "dtensor-torch", "plain": "torch",
                           "hooks": "torch-hooks"}[args.impl],
                   "model": args.model, "params": params, "ranks": world, "batch": args.batch,
                   "rss_base_bytes_per_rank": both[0::2].tolist(), "rss_peak_bytes_per_rank": both[1::2].tolist()}
        print(json.dumps(summary) if args.json else summary, flush=True)
    sys.stdout.flush()
    if args.impl == "torch":
        dist.destroy_process_group()
    os._exit(0)  # gloo may abort in the interpreter's teardown after all work is done


if __name__ == "__main__":
    main(sys.argv[1:])
