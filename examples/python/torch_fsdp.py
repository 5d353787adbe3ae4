#!/usr/bin/env python3
"""A plain torch.nn.Module trained with dtensor's FSDP engine driven from PyTorch module hooks (issue #18).

    dtrun --nproc-per-node 2 python3 examples/python/torch_fsdp.py      # or 4; also under torchrun / mpirun
    python3 examples/python/torch_fsdp.py --reference                   # plain PyTorch only, one process

The model is a small GPT (token and position embeddings, 2 blocks of LayerNorm + causal self-attention + MLP, a
final LayerNorm, a head; float32, seed 0). Each block is one dtensor FSDP group, and the root's remaining parameters
(embeddings, final norm, head) another: the groups shard every parameter on dim 0 over the processes; PyTorch holds
only views (DLPack, no copies) of what the engine owns:

  forward pre-hook    unshard() + wait_unshard(); every param.data points at its gathered value (a torch view)
  forward post-hook   reshard(post_forward=True) (blocks; the root stays gathered until its backward is done)
  backward pre-hook   unshard() + wait_unshard() again (register_full_backward_pre_hook)
  post-accumulate     each param.grad goes to accumulate_grad (a DTensor over the grad, zero copy); once a group
  -grad hook          has every gradient, reduce_grads() (one reduce-scatter)
  after backward      wait_reduce(); the optimizer (torch AdamW) steps on torch views of the sharded parameters,
                      with torch views of the reduced gradient shards as their .grad; reshard()

Each rank trains on its rows of the global batch with the mean loss over its rows; the engine averages gradients
over the ranks (gradient_divide_factor default), so the reduced gradient is that of the global batch's mean loss.
The same model is also trained in this process with plain PyTorch on the whole batch; both loss columns are printed
and must agree within 1e-5 relative, or the script exits 1.
"""
import argparse
import math
import os
import sys

import numpy as np
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


# Note [Saved tensors of gathered parameters]
# reshard() frees a group's gathered memory and the next unshard() fills new memory, possibly at another address
# (the engine's Storage keeps its identity, but a DLPack view holds the raw address). Autograd saves views of the
# parameters in forward (F.linear saves weight.t()) and reads them in backward, after the group has been resharded
# and gathered again: a saved view would read freed memory. So forward runs under saved_tensors_hooks that save a
# view of a gathered parameter as (parameter, offset, sizes, strides) and rebuild it in backward over the
# parameter's current data (its view of the memory gathered by the backward pre-hook). Other tensors pass as they are.
_gathered = {}  # data address of a gathered parameter -> the torch parameter, for the groups gathered now


def _pack(t):
    p = _gathered.get(t.untyped_storage().data_ptr())
    if p is None:
        return t
    return (p, t.storage_offset(), tuple(t.shape), t.stride())


def _unpack(x):
    if isinstance(x, tuple):
        p, offset, shape, stride = x
        return p.data.as_strided(shape, stride, offset)
    return x


class HookedGroup:
    """One dtensor FSDP group over a module's parameters, driven from that module's PyTorch hooks."""

    def __init__(self, dt, mesh, name, module, params, is_root):
        self.dt, self.mesh, self.name, self.is_root = dt, mesh, name, is_root
        self.names = [n for n, _ in params]
        self.params = [p for _, p in params]
        # Every rank built the same model (seed 0): the parameters start replicated; the engine keeps its shard.
        full = [dt.from_dlpack(p.detach(), mesh, [dt.Replicate()], shape=tuple(p.shape), copy=True)
                for p in self.params]
        self.group = dt.FsdpParamGroup(mesh, full, names=self.names, name=name)
        for t in full:
            t.close()
        self.shard_dts = [self.group.sharded_param(i) for i in range(len(self.params))]
        # What the optimizer updates: torch views of the engine's shards (writes go straight into them).
        self.shards = [torch.from_dlpack(s) for s in self.shard_dts]
        self.grad_dts = [None] * len(self.params)
        self.pending = 0
        module.register_forward_pre_hook(lambda m, args: self.gather())
        if not is_root:
            module.register_forward_hook(lambda m, args, out: self.release(post_forward=True))
            module.register_full_backward_pre_hook(lambda m, grad_out: self.gather())
        for i, p in enumerate(self.params):
            p.register_post_accumulate_grad_hook(lambda p, i=i: self.grad_ready(i, p))

    def gather(self):
        self.group.unshard()
        self.group.wait_unshard()
        for i, p in enumerate(self.params):
            full = self.group.unsharded_param(i)
            p.data = torch.from_dlpack(full)  # a view of the gathered storage, no copy
            full.close()
            _gathered[p.data.untyped_storage().data_ptr()] = p
        self.pending = len(self.params)

    def release(self, post_forward=False):
        for p in self.params:
            _gathered.pop(p.data.untyped_storage().data_ptr(), None)
        self.group.reshard(post_forward=post_forward)

    def grad_ready(self, i, p):
        g = self.dt.from_dlpack(p.grad, self.mesh, [self.dt.Replicate()], shape=tuple(p.shape))
        self.group.accumulate_grad(i, g)
        g.close()
        p.grad = None
        self.pending -= 1
        if self.pending == 0:
            self.group.reduce_grads()

    def finish_backward(self):
        """After backward: the reduced gradient shards become the shards' .grad (views); the group reshards."""
        self.group.wait_reduce()
        for i, s in enumerate(self.shards):
            g = self.group.sharded_grad(i)
            self.grad_dts[i] = g  # keeps the gradient shard's handle while the optimizer reads it
            s.grad = torch.from_dlpack(g) if g is not None else None
        self.release()


def train_fsdp(dt, world):
    mesh = dt.DeviceMesh(world, "cpu", (world.size,), ("dp",))
    model = make_model()
    groups = [HookedGroup(dt, mesh, f"blocks.{k}", blk, [(f"blocks.{k}.{n}", p) for n, p in blk.named_parameters()],
                          False) for k, blk in enumerate(model.blocks)]
    root = [(n, p) for n, p in model.named_parameters() if not n.startswith("blocks.")]
    groups.append(HookedGroup(dt, mesh, "root", model, root, True))
    shards = [s for g in groups for s in g.shards]
    opt = torch.optim.AdamW(shards, lr=LR)
    rows = BATCH // world.size
    r0 = world.rank * rows
    losses = []
    for x, y in batches():
        with torch.autograd.graph.saved_tensors_hooks(_pack, _unpack):  # Note [Saved tensors of gathered parameters]
            loss = loss_of(model, x[r0:r0 + rows], y[r0:r0 + rows])
        loss.backward()
        for g in groups:
            g.finish_backward()
        opt.step()
        for s in shards:
            s.grad = None
        # The global batch's mean loss: the mean of the ranks' (equal-sized) means.
        per_rank = dt.DTensor.from_local(np.array([loss.item()]), mesh, [dt.Shard(0)], shape=(world.size,), copy=True)
        losses.append(float(per_rank.full_tensor().mean()))
        per_rank.close()
    for g in groups:
        g.group.close()
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
    import dtensor as dt
    world = dt.init_process_group()
    if BATCH % world.size:
        print(f"torch_fsdp: the global batch ({BATCH} rows) must split evenly over {world.size} processes")
        return 2
    losses = train_fsdp(dt, world)
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
