#!/usr/bin/env python3
"""A plain torch.nn.Module trained with dtensor's FSDP engine through dtensor.torch (issues #18, #38).

    dtrun --nproc-per-node 2 python3 examples/python/torch_fsdp.py      # or 4; also under torchrun
    python3 examples/python/torch_fsdp.py --reference                   # plain PyTorch only, one process

The model is a small GPT (token and position embeddings, 2 blocks of LayerNorm + causal self-attention + MLP, a
final LayerNorm, a head; float32, seed 0). The training loop is a PyTorch FSDP2 script whose imports are
dtensor.torch's: fully_shard on each block, then on the root, shards every parameter on dim 0 over the processes
(one engine parameter group per call); the optimizer (torch AdamW) steps on the local shards; dtensor.torch's hooks
gather before forward and backward, free after, and reduce-scatter the gradients (docs/torch.md).

Each rank trains on its rows of the global batch with the mean loss over its rows; the engine averages gradients
over the ranks, so the reduced gradient is that of the global batch's mean loss. The same model is also trained in
this process with plain PyTorch on the whole batch; both loss columns are printed and must agree within 1e-5
relative, or the script exits 1.
"""
import argparse
import math
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "bindings", "python"))  # a source tree without pip install

VOCAB, SEQ, DIM, HEADS, BLOCKS = 64, 16, 32, 4, 2
BATCH, STEPS, LR = 8, 20, 3e-3


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1 = nn.LayerNorm(DIM)
        self.qkv = nn.Linear(DIM, 3 * DIM)
        self.proj = nn.Linear(DIM, DIM)
        self.ln2 = nn.LayerNorm(DIM)
        self.fc = nn.Linear(DIM, 4 * DIM)
        self.out = nn.Linear(4 * DIM, DIM)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        q, k, v = (z.view(b, t, HEADS, d // HEADS).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(d // HEADS)
        att = att.masked_fill(torch.triu(torch.ones(t, t, dtype=torch.bool), 1), float("-inf")).softmax(-1)
        x = x + self.proj((att @ v).transpose(1, 2).reshape(b, t, d))
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok = nn.Embedding(VOCAB, DIM)
        self.pos = nn.Embedding(SEQ, DIM)
        self.blocks = nn.ModuleList(Block() for _ in range(BLOCKS))
        self.ln_f = nn.LayerNorm(DIM)
        self.head = nn.Linear(DIM, VOCAB)

    def forward(self, idx):
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1]))
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.ln_f(x))


def make_model():
    torch.manual_seed(0)
    return GPT()


def batches():
    """The fixed synthetic token stream: STEPS batches of BATCH rows of SEQ + 1 tokens (inputs and targets)."""
    g = torch.Generator().manual_seed(1234)
    base = torch.randint(0, VOCAB, (STEPS, BATCH, 1), generator=g)
    # A learnable pattern (each token follows from the previous one) with some noise.
    steps = torch.randint(1, 4, (STEPS, BATCH, SEQ), generator=g)
    data = torch.cat([base, base + steps.cumsum(-1)], dim=-1) % VOCAB
    return [(d[:, :-1], d[:, 1:]) for d in data]


def loss_of(model, x, y):
    logits = model(x)
    return F.cross_entropy(logits.reshape(-1, VOCAB), y.reshape(-1))


def train_reference():
    model = make_model()
    opt = torch.optim.AdamW(model.parameters(), lr=LR)
    losses = []
    for x, y in batches():
        loss = loss_of(model, x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def train_fsdp(world_size, rank):
    from dtensor.torch import distributed as dist
    from dtensor.torch import fully_shard, init_device_mesh

    mesh = init_device_mesh("cpu", (world_size,), mesh_dim_names=("dp",))
    model = make_model()
    for block in model.blocks:
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)
    opt = torch.optim.AdamW(model.parameters(), lr=LR)  # the local shards
    rows = BATCH // world_size
    r0 = rank * rows
    losses = []
    for x, y in batches():
        loss = loss_of(model, x[r0:r0 + rows], y[r0:r0 + rows])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        # The global batch's mean loss: the mean of the ranks' (equal-sized) means.
        total = loss.detach().reshape(1).clone()
        dist.all_reduce(total, group=mesh.get_group("dp"))
        losses.append(total.item() / world_size)
    return losses


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reference", action="store_true", help="plain PyTorch in one process only")
    ap.add_argument("--rtol", type=float, default=1e-5)
    args = ap.parse_args()
    torch.set_num_threads(1)
    ref = train_reference()
    if args.reference:
        for step, l in enumerate(ref):
            print(f"step {step:2d}  loss {l:.6f}")
        return 0
    import dtensor
    world = dtensor.init_process_group()
    if BATCH % world.size:
        print(f"torch_fsdp: the global batch ({BATCH} rows) must split evenly over {world.size} processes")
        return 2
    losses = train_fsdp(world.size, world.rank)
    worst = max(abs(a - b) / abs(b) for a, b in zip(losses, ref))
    if world.rank == 0:
        print(f"dtensor FSDP on {world.size} processes vs plain PyTorch on 1 ({STEPS} steps, AdamW lr {LR})")
        print(f"{'step':>4}  {'fsdp loss':>12}  {'torch loss':>12}  {'rel diff':>9}")
        for step, (a, b) in enumerate(zip(losses, ref)):
            print(f"{step:4d}  {a:12.7f}  {b:12.7f}  {abs(a - b) / abs(b):9.2e}")
        verdict = "OK" if worst <= args.rtol else "FAIL"
        print(f"{verdict}: largest relative difference {worst:.2e} (limit {args.rtol:.0e})")
    world.barrier()
    return 0 if worst <= args.rtol else 1


if __name__ == "__main__":
    sys.exit(main())
