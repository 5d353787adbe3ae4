#!/usr/bin/env python3
"""dtensor.torch against PyTorch itself, in the same processes (test_dtensor_torch.py launches them).

    dtrun --nproc-per-node N python3 torch_cases.py CASE [CASE ...]

Each process joins dtensor's world (the launcher's environment) and a gloo process group (MASTER_PORT), builds the
same model twice from one seed, trains one copy with PyTorch FSDP2 (torch.distributed.fsdp.fully_shard, and
torch.distributed.tensor.parallel on 2-d meshes) and the other with dtensor.torch, on the same rows, and compares
each step's loss and the final parameters (gathered) within 1e-5 relative (bf16: bf16's tolerance). Prints
"CASE: ok" per case and rank.
"""
import math
import os
import sys
import tempfile

import torch
import torch.distributed as tdist
import torch.nn as nn
import torch.nn.functional as F

import dtensor
import dtensor.torch as dtt

torch.set_num_threads(1)
for k, v in (("RANK", "DT_RANK"), ("WORLD_SIZE", "DT_WORLD_SIZE")):
    os.environ.setdefault(k, os.environ.get(v, "0" if k == "RANK" else "1"))
os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
os.environ.setdefault("MASTER_PORT", os.environ.get("DT_TEST_TORCH_PORT", "29611"))
tdist.init_process_group("gloo")
W, R = tdist.get_world_size(), tdist.get_rank()
STEPS = int(os.environ.get("DT_TEST_STEPS", "20"))
FULL = bool(os.environ.get("DT_TEST_TORCH_FULL"))  # test_dtensor_torch.py --full


# ---- models -----------------------------------------------------------------------------------------------------

class Attention(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.head_dim = dim // heads
        self.q, self.v, self.o = (nn.Linear(dim, dim) for _ in range(3))
        # No key bias: its gradient is zero in exact arithmetic (softmax ignores a shift per query), so AdamW would
        # amplify rounding noise into lr-sized steps whose signs depend on the order of the reductions.
        self.k = nn.Linear(dim, dim, bias=False)

    def forward(self, x):
        b, t, _ = x.shape
        q, k, v = (f(x).view(b, t, -1, self.head_dim).transpose(1, 2) for f in (self.q, self.k, self.v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(self.head_dim)
        att = att.masked_fill(torch.triu(torch.ones(t, t, dtype=torch.bool), 1), float("-inf")).softmax(-1)
        return self.o((att @ v).transpose(1, 2).reshape(b, t, -1))


class Mlp(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.fc, self.out = nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)

    def forward(self, x):
        return self.out(F.gelu(self.fc(x)))


class Block(nn.Module):
    def __init__(self, dim, heads, checkpointed=False):
        super().__init__()
        self.ln1, self.attn, self.ln2, self.mlp = nn.LayerNorm(dim), Attention(dim, heads), nn.LayerNorm(dim), Mlp(dim)
        self.checkpointed = checkpointed

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        if self.checkpointed:  # activation checkpointing inside the sharded block
            return x + torch.utils.checkpoint.checkpoint(lambda y: self.mlp(self.ln2(y)), x, use_reentrant=False)
        return x + self.mlp(self.ln2(x))


class Gpt(nn.Module):
    """A plain torch.nn GPT (separate q/k/v projections, so that tensor parallelism splits heads)."""

    def __init__(self, vocab=64, seq=16, dim=32, heads=4, blocks=2, checkpointed=False, positions=True):
        super().__init__()
        self.tok = nn.Embedding(vocab, dim)
        self.pos = nn.Embedding(seq, dim) if positions else None
        self.blocks = nn.ModuleList(Block(dim, heads, checkpointed) for _ in range(blocks))
        self.ln_f, self.head = nn.LayerNorm(dim), nn.Linear(dim, vocab)

    def forward(self, idx):
        x = self.tok(idx)
        if self.pos is not None:
            x = x + self.pos(torch.arange(idx.shape[1]))
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.ln_f(x))


class Odd(nn.Module):
    """Edge cases: a parameter used twice, a frozen parameter, a block whose parameters are smaller than the world."""

    def __init__(self, dim=6):
        super().__init__()
        self.twice = nn.Linear(dim, dim)
        self.frozen = nn.Linear(dim, dim)
        self.frozen.weight.requires_grad_(False)
        self.tiny = nn.Linear(dim, 1)  # weight (1, dim), bias (1,): one row over W ranks
        self.back = nn.Linear(1, dim)

    def forward(self, x):
        x = torch.tanh(self.twice(torch.tanh(self.twice(x))))
        x = self.frozen(x)
        return self.back(torch.tanh(self.tiny(x)))


class OddModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = Odd(), Odd()
        self.head = nn.Linear(6, 3)

    def forward(self, x):
        return self.head(self.b(self.a(x)))


def gpt(checkpointed=False, positions=True):
    torch.manual_seed(0)
    return Gpt(checkpointed=checkpointed, positions=positions)


def llama():
    from transformers import LlamaConfig, LlamaForCausalLM
    cfg = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=32,
                      attn_implementation="eager")
    torch.manual_seed(0)
    return LlamaForCausalLM(cfg)


def token_batches(steps, batch=8, seq=16, vocab=64):
    g = torch.Generator().manual_seed(1234)
    data = torch.randint(0, vocab, (steps, batch, seq + 1), generator=g)
    return [(d[:, :-1], d[:, 1:]) for d in data]


def lm_loss(model, x, y):
    out = model(x)
    logits = out.logits if hasattr(out, "logits") else out
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), y.reshape(-1))


# ---- the two sides ------------------------------------------------------------------------------------------------

def torch_side():
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (ColwiseParallel, PrepareModuleInput, RowwiseParallel,
                                                   SequenceParallel, parallelize_module)
    return dict(init_device_mesh=init_device_mesh, fully_shard=fully_shard, MixedPrecisionPolicy=MixedPrecisionPolicy,
                clip_grad_norm_=torch.nn.utils.clip_grad_norm_, ColwiseParallel=ColwiseParallel,
                RowwiseParallel=RowwiseParallel, SequenceParallel=SequenceParallel,
                PrepareModuleInput=PrepareModuleInput, Shard=Shard, Replicate=Replicate,
                parallelize_module=parallelize_module)


def dtensor_side():
    return dict(init_device_mesh=dtt.init_device_mesh, fully_shard=dtt.fully_shard, clip_grad_norm_=dtt.clip_grad_norm_,
                MixedPrecisionPolicy=dtt.MixedPrecisionPolicy, ColwiseParallel=dtt.ColwiseParallel,
                RowwiseParallel=dtt.RowwiseParallel, SequenceParallel=dtt.SequenceParallel,
                PrepareModuleInput=dtt.PrepareModuleInput, Shard=dtt.Shard, Replicate=dtt.Replicate,
                parallelize_module=dtt.parallelize_module)


def blocks_of(model):
    return model.model.layers if hasattr(model, "model") else model.blocks


def sp_plans(api):
    """Sequence parallelism (torchtitan's plan): the residual stream sharded on the sequence between blocks."""
    C, Rw, SP, In = api["ColwiseParallel"], api["RowwiseParallel"], api["SequenceParallel"], api["PrepareModuleInput"]
    S, Rp = api["Shard"], api["Replicate"]
    gather = lambda: In(input_layouts=(S(1),), desired_input_layouts=(Rp(),))  # noqa: E731
    root = {"tok": Rw(input_layouts=Rp(), output_layouts=S(1)), "ln_f": SP(),
            "head": C(input_layouts=S(1), output_layouts=Rp())}
    block = {"ln1": SP(), "attn": gather(), "attn.q": C(), "attn.k": C(), "attn.v": C(),
             "attn.o": Rw(output_layouts=S(1)), "ln2": SP(), "mlp": gather(), "mlp.fc": C(),
             "mlp.out": Rw(output_layouts=S(1))}
    return root, block


def tp_plan(model, api):
    C, Rw = api["ColwiseParallel"], api["RowwiseParallel"]
    if hasattr(model, "model"):  # Llama
        return {"self_attn.q_proj": C(), "self_attn.k_proj": C(), "self_attn.v_proj": C(), "self_attn.o_proj": Rw(),
                "mlp.gate_proj": C(), "mlp.up_proj": C(), "mlp.down_proj": Rw()}
    return {"attn.q": C(), "attn.k": C(), "attn.v": C(), "attn.o": Rw(), "mlp.fc": C(), "mlp.out": Rw()}


def shard(model, api, tp=1, mp=None, sequence_parallel=False, hsdp=False, configure=None, ignored=None,
          root_plan=None, **kwargs):
    """The same script for both sides: parallelize_module per block on mesh['tp'], fully_shard per block, root.
    hsdp: a (replicate, shard) mesh of every process instead, given whole to fully_shard."""
    dp = W // tp
    mesh = api["init_device_mesh"]("cpu", (dp, tp), mesh_dim_names=("dp", "tp"))
    fsdp_mesh = mesh["dp"]
    if hsdp:
        fsdp_mesh = api["init_device_mesh"]("cpu", (2, W // 2), mesh_dim_names=("replicate", "shard"))
    if tp > 1 and sequence_parallel:
        root_plan, block_plan = sp_plans(api)
        api["parallelize_module"](model, mesh["tp"], root_plan)
        for blk in blocks_of(model):
            api["parallelize_module"](blk, mesh["tp"], block_plan)
    elif tp > 1:
        if root_plan is not None:
            api["parallelize_module"](model, mesh["tp"], root_plan(api))
        for blk in blocks_of(model):
            api["parallelize_module"](blk, mesh["tp"], tp_plan(model, api))
    if mp is not None:
        kwargs["mp_policy"] = api["MixedPrecisionPolicy"](**mp)
    if ignored is not None:
        kwargs["ignored_params"] = ignored(model)
    for blk in blocks_of(model):
        api["fully_shard"](blk, mesh=fsdp_mesh, **kwargs)
    api["fully_shard"](model, mesh=fsdp_mesh, **kwargs)
    if configure is not None:
        configure(model)
    return mesh


def train(model, mesh, steps, batches, accumulate=1, loss_fn=lm_loss, sgd=False, keep_between=False, clip=None,
          norms=None, opt=None, microbatches=False, probe=None):
    """accumulate > 1: microbatches without gradient sync but the last (microbatches: with sync, and
    set_is_last_backward only on the last; probe(model, last) after each such backward)."""
    dp, dp_rank = mesh["dp"].size(), mesh["dp"].get_local_rank()
    if opt is None:
        opt = torch.optim.SGD(model.parameters(), lr=0.5) if sgd else \
            torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.1)
    losses = []
    for step in range(steps):
        x, y = batches[step]
        rows = x.shape[0] // dp
        x, y = x[dp_rank * rows:(dp_rank + 1) * rows], y[dp_rank * rows:(dp_rank + 1) * rows]
        opt.zero_grad(set_to_none=True)
        micro = rows // accumulate
        total = 0.0
        for a in range(accumulate):
            if accumulate > 1 and microbatches:
                model.set_is_last_backward(a == accumulate - 1)
            elif accumulate > 1:
                model.set_requires_gradient_sync(a == accumulate - 1)
                if keep_between:  # FSDP2's recipe: keep the gathered parameters between microbatches
                    model.set_reshard_after_backward(a == accumulate - 1)
            loss = loss_fn(model, x[a * micro:(a + 1) * micro], y[a * micro:(a + 1) * micro]) / accumulate
            loss.backward()
            if probe is not None:
                probe(model, a == accumulate - 1)
            total += loss.item()
        if clip is not None:
            norm = clip(model.parameters(), 0.05)
            norms.append((norm.full_tensor() if hasattr(norm, "full_tensor") else norm).item())
        opt.step()
        losses.append(total)
    return losses


def full_params_torch(model):
    return {n: (p.full_tensor() if hasattr(p, "full_tensor") else p).detach().float().clone()
            for n, p in model.named_parameters()}


def full_params_dtensor(model):
    return {n: t.float() for n, t in dtt.full_state_dict(model).items() if n in dict(model.named_parameters())}


def compare(case, losses, ref_losses, params, ref_params, rtol=1e-5, atol=0.0):
    worst = max(abs(a - b) / max(abs(b), 1e-12) for a, b in zip(losses, ref_losses))
    assert worst <= rtol, f"{case}: losses differ by {worst:.2e} relative:\n{losses}\n{ref_losses}"
    assert set(params) == set(ref_params), f"{case}: parameter names {sorted(params)} vs {sorted(ref_params)}"
    for n in ref_params:
        a, b = params[n], ref_params[n]
        assert a.shape == b.shape, f"{case}: {n} shape {tuple(a.shape)} vs {tuple(b.shape)}"
        # Relative to the tensor's norm (a parameter near zero has no meaningful elementwise relative error).
        rel = ((a - b).norm() / b.norm().clamp_min(1e-30)).item()
        assert rel <= rtol or (a - b).abs().max().item() <= atol, \
            f"{case}: parameter {n} differs by {rel:.2e} relative ({(a - b).abs().max().item():.2e} absolute)"
    if R == 0:
        largest = max(((params[n] - ref_params[n]).norm() / ref_params[n].norm().clamp_min(1e-30)).item()
                      for n in ref_params)
        print(f"{case}: {len(losses)} steps, losses within {worst:.1e} relative of PyTorch's, {len(params)} "
              f"parameters within {largest:.1e} relative", flush=True)


def against_torch(case, make, steps=STEPS, tp=1, mp=None, accumulate=1, batches=None, rtol=1e-5, atol=0.0,
                  loss_fn=lm_loss, sgd=False, keep_between=False, clip=False, microbatches=False, probe=None,
                  **kwargs):
    """probe: called on the dtensor side only (train's)."""
    batches = batches or token_batches(steps)
    ref = make()
    api = torch_side()
    mesh = shard(ref, api, tp, mp, **kwargs)
    ref_norms, norms = [], []
    reference_clip = api["clip_grad_norm_"] if tp == 1 else clip_from_full_tensors
    ref_losses = train(ref, mesh, steps, batches, accumulate, loss_fn, sgd, keep_between,
                       reference_clip if clip else None, ref_norms, microbatches=microbatches)
    ref_params = full_params_torch(ref)
    model = make()
    api = dtensor_side()
    mesh = shard(model, api, tp, mp, **kwargs)
    losses = train(model, mesh, steps, batches, accumulate, loss_fn, sgd, keep_between,
                   api["clip_grad_norm_"] if clip else None, norms, microbatches=microbatches, probe=probe)
    for a, b in zip(norms, ref_norms):
        assert abs(a - b) <= 1e-5 * abs(b), f"{case}: gradient norms {norms} against PyTorch's {ref_norms}"
    compare(case, losses, ref_losses, full_params_dtensor(model), ref_params, rtol, atol)
    return model


# ---- cases --------------------------------------------------------------------------------------------------------

def case_gpt():
    against_torch("gpt", gpt)


def case_llama():
    against_torch("llama", llama)


# Tensor parallelism rounds differently from PyTorch's DTensor (a rowwise bias is added after the reduction here,
# on one rank's partial sum there), so 20 steps of AdamW leave parameters apart by rounding: within 1e-5 of each
# tensor's norm. One SGD step first: AdamW would hide a gradient off by a constant factor.
def case_gpt_tp():
    against_torch("gpt_tp_sgd", gpt, steps=1, tp=2, sgd=True)
    against_torch("gpt_tp", gpt, tp=2)


def case_gpt_tp_root():
    """The root's layers too: column-sharded embeddings (their dim) and head, gathered back to Replicate."""
    def plan(api):
        C, Rp = api["ColwiseParallel"], api["Replicate"]
        return {"tok": C(output_layouts=Rp()), "pos": C(output_layouts=Rp()), "head": C(output_layouts=Rp())}
    against_torch("gpt_tp_root_sgd", gpt, steps=1, tp=2, sgd=True, root_plan=plan)
    against_torch("gpt_tp_root", gpt, steps=10, tp=2, root_plan=plan)


def case_llama_tp():
    against_torch("llama_tp_sgd", llama, steps=1, tp=2, sgd=True)
    against_torch("llama_tp", llama, tp=2)


def case_bf16():
    mp = dict(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    against_torch("bf16", gpt, steps=10, mp=mp, rtol=2e-2, atol=0)
    if FULL:
        against_torch("bf16_llama", llama, steps=10, mp=mp, rtol=2e-2, atol=0)


def case_accumulate():
    against_torch("accumulate", gpt, steps=6, accumulate=2)


def case_microbatches():
    """set_is_last_backward(False) on all microbatches but the last, gradient sync on (FSDP2's microbatch recipe):
    the same losses and parameters as PyTorch's; each backward but the last leaves a reduction in flight (Note [Not
    the last backward]) and the last leaves none; called on a block, the setting reaches the root."""
    left = []

    def probe(model, last):
        pending = [m._dt_state.group.label for m in model.modules()
                   if getattr(m, "_dt_state", None) is not None and m._dt_state.group is not None
                   and m._dt_state.group.reduce_issued]
        assert len(pending) == (0 if last else 1), f"microbatches: reductions in flight {pending} (last={last})"
        left.append(len(pending))
    model = against_torch("microbatches", gpt, steps=4, accumulate=2, microbatches=True, probe=probe)
    assert left == [1, 0] * 4, left
    # Once the root is made, the setting is the whole tree's whichever module it is called on (FSDP2's is shared).
    for last in (False, True):
        model.blocks[0].set_is_last_backward(last)
        assert model._dt_state.is_last_backward is last, "set_is_last_backward on a block missed the root"


def case_divide_factor():
    """torchtitan's disable_fsdp_gradient_division: set_gradient_divide_factor(1.0) on every FSDP module (the
    gradients summed over the ranks, the loss divided by the script), then 2.0 on the blocks, with force-sum
    reductions; SGD, whose steps show a wrong factor (AdamW's would hide it): the same losses and parameters as
    PyTorch FSDP2's."""
    def configure(model):
        for m in model.modules():
            if hasattr(m, "set_gradient_divide_factor") and hasattr(m, "reshard"):
                m.set_force_sum_reduction_for_comms(True)  # gloo has no PREMUL_SUM: FSDP2 needs sums there
                m.set_gradient_divide_factor(1.0)
        for blk in blocks_of(model):
            blk.set_gradient_divide_factor(2.0)
    against_torch("divide_factor", gpt, steps=4, sgd=True, configure=configure,
                  loss_fn=lambda m, x, y: lm_loss(m, x, y) / W)


def case_reshard_options():
    against_torch("keep_after_forward", gpt, steps=4, reshard_after_forward=False)


def case_sequence_parallel():
    against_torch("sequence_parallel_sgd", lambda: gpt(positions=False), steps=1, tp=2, sgd=True,
                  sequence_parallel=True)
    against_torch("sequence_parallel", lambda: gpt(positions=False), tp=2, sequence_parallel=True)


def clip_from_full_tensors(parameters, max_norm):
    """The reference under FSDP + TP, where PyTorch's clip_grad_norm_ refuses gradients on two meshes (the dp mesh and
    the 2-d one): the norm of the gathered gradients, and every gradient scaled by the same factor."""
    grads = [p.grad for p in parameters if p.grad is not None]
    norm = sum((g.full_tensor() if hasattr(g, "full_tensor") else g).double().pow(2).sum() for g in grads).sqrt()
    scale = min(1.0, max_norm / (norm.item() + 1e-6))
    for g in grads:
        g.mul_(scale)
    return norm


def case_clip():
    """clip_grad_norm_ over the sharded gradients (FSDP; FSDP + TP on 4 processes): the global norm, every step."""
    tp = 2 if W == 4 else 1
    # SGD under TP: AdamW turns the rounding of the rowwise biases (see case_gpt_tp) into 1e-5 differences in 6 steps.
    against_torch("clip", gpt, steps=6, tp=tp, clip=True, sgd=tp > 1)


def case_hsdp():
    against_torch("hsdp", gpt, steps=6, hsdp=True)


def case_prefetch():
    """Explicit prefetch lists, reshard_after_forward as an int, no reshard after backward between accumulations."""
    def configure(model):
        blocks = list(blocks_of(model))
        for a, b in zip(blocks, blocks[1:]):
            a.set_modules_to_forward_prefetch([b])
            b.set_modules_to_backward_prefetch([a])
    against_torch("explicit_prefetch", gpt, steps=4, configure=configure, reshard_after_forward=W // 2 or 1)

    against_torch("no_reshard_after_backward", gpt, steps=4, accumulate=2, keep_between=True)
    # unshard() / reshard() by hand: the gathered parameters are the full ones.
    model = gpt()
    shard(model, dtensor_side())
    full = dtt.full_state_dict(model)
    blk = blocks_of(model)[0]
    handle = blk.unshard(async_op=True)
    handle.wait()
    for n, p in blk.named_parameters():
        assert torch.equal(p, full["blocks.0." + n]), f"unshard(): blocks.0.{n} is not the full parameter"
    blk.reshard()
    assert blk.attn.q.weight.shape[0] == -(-32 // W), "reshard(): the module shows its shards again"
    if R == 0:
        print("prefetch: unshard() shows the full parameters, reshard() the shards", flush=True)


def case_edge():
    """Activation checkpointing inside a block; a parameter used twice, a frozen one, one smaller than the world."""
    against_torch("checkpointed", lambda: gpt(checkpointed=True), steps=4)
    # Ignored parameters stay whole and unsynchronized on every rank (FSDP2's ignored_params).
    against_torch("ignored_params", gpt, steps=4, ignored=lambda m: {m.head.bias, m.blocks[0].ln1.weight})

    def odd():
        torch.manual_seed(0)
        m = OddModel()
        m.blocks = nn.ModuleList([m.a, m.b])  # the blocks the script shards first
        return m
    g = torch.Generator().manual_seed(5)
    batches = [(torch.randn(8, 6, generator=g), torch.randn(8, 3, generator=g)) for _ in range(4)]
    against_torch("odd_parameters", odd, steps=4, batches=batches,
                  loss_fn=lambda m, x, y: F.mse_loss(m(x), y))


def case_meta_init():
    """torchtitan's order (Note [Meta-device parameters]): the model built on the meta device, fully_shard, to_empty,
    then initialized. Loading the reference's full weights (as from a checkpoint) trains as PyTorch FSDP2 does; each
    rank filling its own rows makes those rows of the whole parameters (HSDP on 4: replica 0's rows everywhere)."""
    ref_full = {k: v.clone() for k, v in gpt().state_dict().items()}
    hsdp = W == 4

    def meta_gpt():
        with torch.device("meta"):
            return Gpt()

    sides = []

    def make():
        sides.append(len(sides))
        return gpt() if len(sides) == 1 else meta_gpt()  # the reference first, then dtensor.torch's

    def configure(model):
        if len(sides) == 2:
            model.to_empty(device="cpu")
            dtt.load_full_state_dict(model, ref_full)
    against_torch("meta_init_hsdp" if hsdp else "meta_init", make, steps=4, configure=configure, hsdp=hsdp)
    model = meta_gpt()
    mesh = dtt.init_device_mesh("cpu", (2, W // 2) if hsdp else (W,),
                                mesh_dim_names=("replicate", "shard") if hsdp else ("dp",))
    for blk in model.blocks:
        dtt.fully_shard(blk, mesh=mesh)
    dtt.fully_shard(model, mesh=mesh)
    expect_error("forward before to_empty", lambda: model(torch.zeros(2, 4, dtype=torch.long)), "meta device",
                 "to_empty")
    model.to_empty(device="cpu")
    with torch.no_grad():
        for p in model.parameters():
            p.fill_(R + 1)
    half = nn.Linear(4, 4)
    half.bias = nn.Parameter(torch.empty(4, device="meta"))
    expect_error("a module half on the meta device", lambda: dtt.fully_shard(half, mesh=mesh), "Linear", "meta")
    k = W // 2 if hsdp else W
    for name, t in dtt.full_state_dict(model).items():
        if name not in dict(model.named_parameters()) or t.dim() == 0:
            continue
        c = -(-t.shape[0] // k)
        for s_ in range(k):  # shard s's rows hold the fill of rank s (replica 0's under HSDP)
            rows = t[s_ * c:(s_ + 1) * c]
            assert rows.numel() == 0 or torch.all(rows == s_ + 1), (name, s_, rows)
    if R == 0:
        print(f"meta_init: meta model + to_empty trains as FSDP2{' (HSDP)' if hsdp else ''}; each rank's rows "
              f"assemble the parameters", flush=True)


def case_meta_init_tp():
    """torchtitan's order with tensor parallelism (Note [Meta-device parameters]): the model built on the meta device,
    parallelize_module per block, fully_shard, to_empty, then the reference's full weights loaded: trains as PyTorch
    FSDP2 + parallelize_module does from the same weights."""
    ref_full = {k: v.clone() for k, v in gpt().state_dict().items()}
    sides = []

    def make():
        sides.append(len(sides))
        if len(sides) == 1:  # the reference first, then dtensor.torch's
            return gpt()
        with torch.device("meta"):
            return Gpt()

    def configure(model):
        if len(sides) == 2:
            assert all(p.is_meta for p in model.parameters()), "meta_init_tp: the sharded model is not on meta"
            model.to_empty(device="cpu")
            dtt.load_full_state_dict(model, ref_full)
    against_torch("meta_init_tp", make, steps=4, tp=2, configure=configure)


def case_collectives():
    mesh = dtt.init_device_mesh("cpu", (W,), mesh_dim_names=("dp",))
    g = mesh.get_group("dp")
    x = torch.arange(6, dtype=torch.float32).reshape(2, 3) * (R + 1) + 0.5
    for op, top in (("sum", tdist.ReduceOp.SUM), ("max", tdist.ReduceOp.MAX), ("min", tdist.ReduceOp.MIN)):
        a, b = x.clone(), x.clone()
        dtt.all_reduce(a, op, g)
        tdist.all_reduce(b, top)
        assert torch.equal(a, b), (op, a, b)
    a, b = torch.empty(2 * W, 3), torch.empty(2 * W, 3)
    dtt.all_gather_into_tensor(a, x, g)
    tdist.all_gather_into_tensor(b, x)
    assert torch.equal(a, b)
    big = torch.randn(2 * W, 3, generator=torch.Generator().manual_seed(R))
    a, b = torch.empty(2, 3), torch.empty(2, 3)
    dtt.reduce_scatter_tensor(a, big, group=g)
    tdist.reduce_scatter_tensor(b, big)
    assert torch.allclose(a, b, rtol=1e-6, atol=1e-6), (a, b)
    a, b = x.clone(), x.clone()
    dtt.broadcast(a, src=W - 1, group=g)
    tdist.broadcast(b, src=W - 1)
    assert torch.equal(a, b)
    a, b = torch.empty(2 * W, 3), torch.empty(2 * W, 3)
    dtt.all_to_all_single(a, big, group=g)
    tdist.all_to_all_single(b, big)
    assert torch.equal(a, b), (a, b)
    # Uneven splits (one of them empty): rank r sends (r + 2j) % 3 rows to rank j.
    send = [(R + 2 * j) % 3 for j in range(W)]
    recv = [(r + 2 * R) % 3 for r in range(W)]
    src = torch.randn(sum(send), 3, generator=torch.Generator().manual_seed(10 + R))
    a, b = torch.full((sum(recv), 3), -1.0), torch.full((sum(recv), 3), -1.0)
    from dtensor.torch import distributed as dist  # the torch.distributed names
    dist.all_to_all_single(a, src, recv, send, group=g)
    tdist.all_to_all_single(b, src, recv, send)
    assert torch.equal(a, b), (a, b)
    # Split sizes that disagree: an error on every rank (this one's names its sizes), not a hang.
    wrong = list(recv)
    if R == 0:
        wrong[0] += 1
    out = torch.empty(sum(wrong), 3)
    msg = expect_error("all_to_all_single mismatch",
                       lambda: dtt.all_to_all_single(out, src, group=g, output_split_sizes=wrong,
                                                     input_split_sizes=send), "all_to_all_single")
    assert ("but the ranks send it" in msg) == (R == 0), msg
    expect_error("all_to_all_single bad sizes", lambda: dtt.all_to_all_single(out, src, group=g,
                 input_split_sizes=[1] * (W + 1)), "input_split_sizes", "summing")
    dtt.barrier(g)
    c = x.clone()
    dist.all_reduce(c, dist.ReduceOp.SUM, group=g)
    d = x.clone()
    tdist.all_reduce(d)
    assert torch.equal(c, d) and dist.get_world_size() == W and dist.get_rank() == R
    if R == 0:
        print("collectives: all_reduce, all_gather_into_tensor, reduce_scatter_tensor, broadcast, all_to_all_single "
              "(even and uneven splits) equal gloo's", flush=True)


def expect_error(what, fn, *words):
    try:
        fn()
    except Exception as e:  # noqa: BLE001
        msg = str(e)
        for w in words:
            assert w in msg, f"{what}: the message does not name {w!r}: {msg}"
        return msg
    raise AssertionError(f"{what}: no exception")


def case_errors():
    mesh = dtt.init_device_mesh("cpu", (W,), mesh_dim_names=("dp",))
    m = gpt()
    dtt.fully_shard(m.blocks[0], mesh=mesh)
    expect_error("sharding twice", lambda: dtt.fully_shard(m.blocks[0], mesh=mesh), "Block", "already sharded")
    expect_error("a mesh without the dim", lambda: mesh["tp"], "tp", "dp")
    expect_error("a mesh without the dim", lambda: dtt.all_reduce(torch.ones(1), group=mesh, mesh_dim="tp"), "tp")
    m2 = gpt()
    opt = torch.optim.AdamW(m2.parameters())
    for blk in m2.blocks:
        dtt.fully_shard(blk, mesh=mesh)
    dtt.fully_shard(m2, mesh=mesh)
    lm_loss(m2, *token_batches(1)[0]).backward()
    expect_error("an optimizer built before fully_shard", opt.step, "AdamW", "tok.weight of Gpt", "after fully_shard")
    m3 = gpt()
    shard(m3, dtensor_side())
    opt3 = torch.optim.AdamW(m3.parameters())
    lm_loss(m3, *token_batches(1)[0]).backward()
    expect_error("optimizer state while gradients are held", lambda: dtt.optimizer_state_dict(m3, opt3), "AdamW",
                 "gradients")
    # A block whose forward raises (here a wrong input, after a first step set the fast call up) is resharded as
    # after a forward, and the model goes on as one that never saw the error: the same loss and gradients.
    ref, m4 = gpt(), gpt()
    x, y = token_batches(1)[0]
    for model in ref, m4:
        shard(model, dtensor_side())
        lm_loss(model, x, y).backward()
    expect_error("a block's forward raising", lambda: m4.blocks[0](torch.zeros(2, 3)))
    assert not m4.blocks[0]._dt_state.group.gathered, "a block whose forward raised stayed gathered"
    losses = [lm_loss(model, x, y) for model in (ref, m4)]
    for loss in losses:
        loss.backward()
    assert torch.equal(losses[0], losses[1]), f"after a failed forward the loss differs: {losses}"
    for a, b in zip(ref.parameters(), m4.parameters()):
        assert torch.equal(a.grad, b.grad), "after a failed forward the gradients differ"
    # A tensor of another device kind than the mesh's (a CUDA tensor on a CPU mesh; for collectives "meta" stands for
    # it without a GPU: the check is the same; fully_shard takes meta modules: case_meta_init).
    kind = "cuda" if torch.cuda.is_available() else "meta"
    if kind == "cuda":
        lin = nn.Linear(4, 4, device=kind)
        expect_error(f"a {kind} module on a CPU mesh", lambda: dtt.fully_shard(lin, mesh=mesh), "Linear", kind, "cpu")
    expect_error(f"a {kind} tensor in a collective", lambda: dtt.all_reduce(torch.ones(2, device=kind), group=mesh),
                 "all_reduce", kind)
    expect_error("a 3-d mesh", lambda: dtt.fully_shard(nn.Linear(2, 2), mesh=dtt.init_device_mesh(
        "cpu", (W, 1, 1), mesh_dim_names=("a", "b", "c"))), "Linear", "1-d")
    # An error inside a pre-backward hook reaches backward()'s caller as itself: here a prefetch target that is not a
    # group (on the compiled bodies the hook is the libtorch bridge's C++ one, Note [The libtorch bridge], and the C
    # body's type check raises; the Python body calls the target's unshard()).
    from dtensor.torch import _hook_bodies as bodies

    class Broken:
        def unshard(self):
            raise KeyError("a broken prefetch target")

    m5 = gpt()
    shard(m5, dtensor_side())
    lm_loss(m5, x, y).backward()  # the first step sets the fast call up
    m5.blocks[1]._dt_state.backward_targets = (Broken(),)
    compiled = bodies.GroupBase is not bodies.GroupHooks
    expected = TypeError if compiled else KeyError
    try:
        lm_loss(m5, x, y).backward()
    except expected as e:
        assert ("Broken" if compiled else "broken prefetch") in str(e), e
    else:
        raise AssertionError(f"a pre-backward hook's {expected.__name__} did not reach backward()")
    if R == 0:
        print("errors: sharding twice, a missing mesh dim, an early optimizer, a foreign device: clear messages; a "
              "failed forward leaves the model as it was; a hook's error reaches backward()", flush=True)


def _ckpt_dir():
    path = os.environ.get("DT_TEST_CKPT")
    assert path, "DT_TEST_CKPT names the checkpoint folder"
    return path


def case_ckpt_save():
    """FSDP on this world: train 3 steps, save the sharded state dict and (rank 0) the full one for the check."""
    model = gpt()
    mesh = shard(model, dtensor_side())
    train(model, mesh, 3, token_batches(3))
    sd = model.state_dict()
    assert all(isinstance(v, dtensor.DTensor) for v in sd.values()), "state_dict() entries are dtensor DTensors"
    dtensor.checkpoint.save(os.path.join(_ckpt_dir(), "ckpt"), sd)
    full = dtt.full_state_dict(model)
    if R == 0:
        torch.save(full, os.path.join(_ckpt_dir(), "full.pt"))
    # With the optimizer: 3 steps, the model and AdamW's state saved, 3 more steps whose losses the load checks.
    model = gpt()
    mesh = shard(model, dtensor_side())
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.1)
    batches = token_batches(6)
    train(model, mesh, 3, batches, opt=opt)
    osd = dtt.optimizer_state_dict(model, opt)
    assert any(isinstance(v, dtensor.DTensor) for v in osd.values()) and any(k.endswith(".step") for k in osd), osd
    dtt.save(os.path.join(_ckpt_dir(), "ckpt_optim"), {**model.state_dict(), **osd})
    after = train(model, mesh, 3, batches[3:], opt=opt)
    torch.save(after, os.path.join(_ckpt_dir(), f"after_{mesh['dp'].get_local_rank()}.pt"))
    tdist.barrier()


def case_ckpt_load():
    """Another world size and layout (FSDP + TP when 4 ranks): the checkpoint loads; the full values equal the saved
    ones; a full state dict loads too; the Hugging Face export reads back with transformers."""
    tp = 2 if W == 4 else 1
    model = gpt()
    shard(model, dtensor_side(), tp=tp)
    dtensor.checkpoint.load(os.path.join(_ckpt_dir(), "ckpt"), model.state_dict())
    saved = torch.load(os.path.join(_ckpt_dir(), "full.pt"))
    got = dtt.full_state_dict(model)
    for k, v in saved.items():
        assert torch.equal(got[k], v), f"ckpt_load: {k} differs after loading at world {W}, tp {tp}"
    # The full state dict into a fresh sharded model, and its outputs against the plain model's.
    fresh = gpt()
    shard(fresh, dtensor_side(), tp=tp)
    dtt.load_full_state_dict(fresh, saved)
    plain = gpt()
    plain.load_state_dict(saved)
    x = token_batches(1)[0][0]
    assert torch.allclose(fresh(x), plain(x), rtol=1e-5, atol=1e-5), "ckpt_load: outputs after load_full_state_dict"
    # A fresh model and optimizer resume from the model + optimizer checkpoint: the next steps' losses are the
    # saving run's (tensor parallelism rounds differently: within 1e-5).
    resumed = gpt()
    mesh = shard(resumed, dtensor_side(), tp=tp)
    opt = torch.optim.AdamW(resumed.parameters(), lr=3e-3, weight_decay=0.1)
    dtt.load(os.path.join(_ckpt_dir(), "ckpt_optim"),
             {**resumed.state_dict(), **dtt.optimizer_state_dict(resumed, opt)})
    assert all(s["step"].item() == 3 for s in opt.state.values()), "ckpt_load: AdamW's step after loading"
    losses = train(resumed, mesh, 3, token_batches(6)[3:], opt=opt)
    expected = torch.load(os.path.join(_ckpt_dir(), f"after_{mesh['dp'].get_local_rank()}.pt"))
    worst = max(abs(a - b) / abs(b) for a, b in zip(losses, expected))
    assert worst <= 1e-5, f"ckpt_load: resumed losses {losses} against the saving run's {expected}"
    # The control: the same weights with a fresh AdamW part from the saving run at the second step.
    weights_only = gpt()
    mesh = shard(weights_only, dtensor_side(), tp=tp)
    dtt.load(os.path.join(_ckpt_dir(), "ckpt_optim"), weights_only.state_dict(), strict=False)
    control = train(weights_only, mesh, 2, token_batches(6)[3:])
    assert abs(control[1] - expected[1]) > 1e-4 * abs(expected[1]), "ckpt_load: the check needs the optimizer state"
    if R == 0:
        print(f"ckpt: saved on 2 ranks (FSDP), loaded on {W} (tp {tp}): {len(saved)} tensors equal; model + AdamW "
              f"state resumed: 3 more steps within {worst:.1e} of the saving run's", flush=True)


def case_hf_export():
    model = llama()
    shard(model, dtensor_side())
    train(model, model_mesh(), 2, token_batches(2))
    full = dtt.full_state_dict(model)
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "hf") if R == 0 else None
        obj = [path]
        tdist.broadcast_object_list(obj)
        path = obj[0]
        dtt.export_hf(model, path)
        from transformers import LlamaForCausalLM
        back = LlamaForCausalLM.from_pretrained(path)
        for k, v in back.state_dict().items():
            assert torch.equal(v, full[k]), f"hf_export: {k}"
        tdist.barrier()
    if R == 0:
        print("hf_export: transformers reads the exported folder back, every tensor equal", flush=True)


def case_hook_path():
    """The per-step hook bodies in use (Note [Hook costs]): the compiled ones where the package's _speedups is loaded
    (meson names the build's in DTENSOR_SPEEDUPS), with the libtorch bridge unless DTENSOR_TORCH_BRIDGE=0 (Note [The
    libtorch bridge]), the Python ones under DTENSOR_NO_SPEEDUPS; the other cases then check whichever runs against
    PyTorch."""
    from dtensor.torch import _hook_bodies as bodies
    compiled = bool(os.environ.get("DTENSOR_SPEEDUPS")) and not os.environ.get("DTENSOR_NO_SPEEDUPS")
    used = bodies.GroupBase is not bodies.GroupHooks
    assert used == compiled, f"compiled hook bodies expected: {compiled}, in use: {used}"
    assert (bodies.StateBase is not bodies.StateHooks) == used
    bridge = used and os.environ.get("DTENSOR_TORCH_BRIDGE", "") != "0"  # Note [The libtorch bridge]
    assert bodies.bridged == bridge, f"the libtorch bridge expected: {bridge}, in use: {bodies.bridged}"
    if R == 0:
        print(f"hook_path: the {'compiled' if used else 'Python'} hook bodies" +
              (", with the libtorch bridge" if bridge else ""), flush=True)


def case_moved_views():
    """Note [Gathered memory that moves]: gathered memory that moves between forward and backward. Between
    the two, NaN-filled blocks of the gathered parameters' sizes are held, so that the pool hands them the freed
    memory and the backward's gathers land elsewhere (each such gather rebuilds its group's views: counted); a saved
    view of the old memory would read NaN. The middle layer's weight must move: its saved view computes the first
    layer's gradients. The gradients equal those of the same step without the held blocks, bit for bit. Run on 1
    process (test_dtensor_torch.py says why)."""
    from dtensor.torch._param_group import TorchParamGroup
    mesh = dtt.init_device_mesh("cpu", (W,), mesh_dim_names=("dp",))

    def step(interfere):
        torch.manual_seed(7)
        model = nn.Sequential(nn.Linear(128, 256), nn.Tanh(), nn.Linear(256, 128), nn.Tanh(), nn.Linear(128, 256))
        layers = model[0], model[2], model[4]
        for layer in layers:
            dtt.fully_shard(layer, mesh=mesh)
        dtt.fully_shard(model, mesh=mesh)
        x = torch.randn(4 * W, 128)[R * 4:(R + 1) * 4]
        out = model(x)
        held = []
        if interfere:  # the engine's pool hands the freed blocks to these
            for layer in layers:
                for m in layer._dt_state.group.params:
                    for _ in range(3):
                        held.append(dtensor.tensor.from_dlpack(torch.full((math.prod(m.shape),), float("nan")),
                                                               mesh.dt_mesh, [dtensor.Replicate()], copy=True))
        moved = []
        rebuild = TorchParamGroup._rebuild_views
        TorchParamGroup._rebuild_views = lambda self: (moved.append(self), rebuild(self))[1]
        try:
            out.pow(2).mean().backward()
        finally:
            TorchParamGroup._rebuild_views = rebuild
        for h in held:
            h.close()
        return [p.grad.clone() for p in model.parameters()], moved, model[2]._dt_state.group

    ref, _, _ = step(False)
    got, moved, middle = step(True)
    assert any(g is middle for g in moved), "the middle layer's gathered memory did not move: the case checks nothing"
    for a, b in zip(ref, got):
        assert torch.equal(a, b), f"gradients differ after a move: {(a - b).abs().max().item()}"
    if R == 0:
        print(f"moved_views: {len(moved)} gathers moved between forward and backward; gradients equal", flush=True)


def model_mesh():
    return dtt.init_device_mesh("cpu", (W, 1), mesh_dim_names=("dp", "tp"))


CASES = {k[len("case_"):]: v for k, v in globals().items() if k.startswith("case_")}

if __name__ == "__main__":
    for name in sys.argv[1:]:
        if name not in CASES:
            sys.exit(f"torch_cases.py: unknown case {name!r} (cases: {', '.join(CASES)})")
        CASES[name]()
        print(f"{name}: ok", flush=True)
    tdist.barrier()
    tdist.destroy_process_group()
    sys.stdout.flush()
    os._exit(0)  # gloo may abort in the interpreter's teardown after all work is done
