"""PyTorch's side of bench/attention: torch.nn.functional.scaled_dot_product_attention(is_causal=True) forward +
backward on q, k, v [batch, heads, T, head_dim] f32 (CPU: PyTorch's own flash-attention kernel), timed like
attention_bench; saved_bytes: what autograd saves for the backward plus the output (saved_tensors_hooks).
Prints one JSON line. Usage: torch_sdpa.py --t 1024 [--batch 1] [--heads 8] [--kv-heads 8] [--head-dim 64]
[--iters 5] [--warmup 1] [--threads N]"""
import argparse
import json
import statistics
import time

import torch


def main():
    ap = argparse.ArgumentParser()
    for name, default in (("t", 1024), ("batch", 1), ("heads", 8), ("kv-heads", 8), ("head-dim", 64), ("iters", 5),
                          ("warmup", 1), ("threads", 1)):
        ap.add_argument("--" + name, type=int, default=default)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    g = torch.Generator().manual_seed(0)
    q = torch.randn(a.batch, a.heads, a.t, a.head_dim, generator=g, requires_grad=True)
    k = torch.randn(a.batch, a.kv_heads, a.t, a.head_dim, generator=g, requires_grad=True)
    v = torch.randn(a.batch, a.kv_heads, a.t, a.head_dim, generator=g, requires_grad=True)
    grad = torch.randn(a.batch, a.heads, a.t, a.head_dim, generator=g)
    gqa = a.heads != a.kv_heads
    times, saved = [], 0
    for i in range(a.warmup + a.iters):
        packed = []

        def pack(t):
            packed.append(t.numel() * t.element_size())
            return t

        t0 = time.perf_counter()
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            out = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=gqa)
        out.backward(grad)
        s = time.perf_counter() - t0
        # Inputs saved by reference are not new memory: count what is not q, k or v.
        saved = sum(packed)  # q, k, v, out and the log-sum-exp
        q.grad = k.grad = v.grad = None
        if i >= a.warmup:
            times.append(s)
    inputs = sum(x.numel() * x.element_size() for x in (q, k, v))
    print(json.dumps({"impl": "torch", "t": a.t, "batch": a.batch, "heads": a.heads, "kv_heads": a.kv_heads,
                      "head_dim": a.head_dim, "threads": a.threads, "fwd_bwd_s": [round(x, 6) for x in times],
                      "median_s": statistics.median(times), "saved_bytes": max(0, saved - inputs)}))


if __name__ == "__main__":
    main()
