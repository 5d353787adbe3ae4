"""PyTorch's side of bench/checkpoint: torch.distributed.checkpoint (DCP) on the state bench/ckpt_bench saves.

Under torchrun on gloo (CPU), 2 or 4 processes:

    torchrun --nproc-per-node 2 torch_dcp.py                 (issue #16's MLP and AdamW state)
    torchrun --nproc-per-node 2 torch_dcp.py --mb 256        (256 MiB per rank in 16 tensors)

The state is ckpt_bench's (bench/checkpoint/ckpt_bench.cc): the same names and global shapes, f32 DTensors Shard(0)
on a 1-d init_device_mesh("cpu", (world,)) made by distribute_tensor (each rank slices the same seeded full tensor:
src_data_rank=None), in one flat state dict: `model.layers.i.{norm,fc1,fc2}.{weight,bias}` then
`optim.state.<name>.exp_avg` and `.exp_avg_sq`; or `synthetic.i` (i < 16) of [world * 16 N, 1024] with --mb N.

Each round runs every mode once, a barrier before each, timed per rank from the barrier's end; a round's time is the
maximum over ranks (an all_reduce MAX):
  save          dcp.save(state_dict, checkpoint_id=fresh folder): FileSystemWriter's defaults (one file per rank,
                sync_files=True: fsync, one thread).
  save_async    dcp.async_save (default: the thread checkpointer): op "save_async_call" until it returns, op
                "save_async" until its future's result().
  load          dcp.load into zeroed DTensors of the same layout (checked equal to the saved values every round).
  load_reshard  dcp.load into zeroed DTensors Shard(1) (1-d tensors: Shard(0)), checked the same way.
Prints per op one JSON line from rank 0, the median over the rounds after --warmup:
  {"bench":"checkpoint","impl":"torch-dcp","op":..,"state":..,"ranks":..,"bytes_per_rank":..,"time_s":..,
   "gbs_per_rank":..,"rounds":..,"samples_s":[..],"threads":..}
Leaves with os._exit(0) after destroying the process group (gloo in 2.15 sometimes aborts at exit otherwise).
"""
import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from concurrent.futures import Future

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor, Shard, distribute_tensor

OPS = ("save", "save_async_call", "save_async", "load", "load_reshard")


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--dim", type=int, default=512)
    p.add_argument("--mb", type=int, default=0, help="synthetic state: N MiB per rank in 16 tensors")
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--dir", default=os.environ.get("TMPDIR") or "/tmp", help="parent of the benchmark's folder")
    a = p.parse_args(argv)
    if a.layers < 1 or a.dim < 1 or a.mb < 0 or a.warmup < 0 or a.rounds <= a.warmup:
        p.error("--layers, --dim: at least 1; --mb, --warmup: at least 0; --rounds: more than --warmup")
    return a


def state_specs(a, world):
    """(name, global shape) in state-dict order, as ckpt_bench's state_specs."""
    if a.mb > 0:
        return [(f"synthetic.{i}", (world * 16 * a.mb, 1024)) for i in range(16)]
    d, h = a.dim, 4 * a.dim
    specs = []
    for i in range(a.layers):
        p = f"model.layers.{i}."
        specs += [(p + "norm.weight", (d,)), (p + "norm.bias", (d,)), (p + "fc1.weight", (h, d)), (p + "fc1.bias", (h,)),
                  (p + "fc2.weight", (d, h)), (p + "fc2.bias", (d,))]
    return specs + [(f"optim.state.{n}{m}", s) for n, s in specs for m in (".exp_avg", ".exp_avg_sq")]


def main():
    a = parse_args(sys.argv[1:])
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    mesh = init_device_mesh("cpu", (world,))

    source, target, reshard_target, reshard_want = {}, {}, {}, {}
    for i, (name, shape) in enumerate(state_specs(a, world)):
        full = torch.randn(shape, generator=torch.Generator().manual_seed(1000 + i))
        resharded = [Shard(1) if len(shape) > 1 else Shard(0)]
        source[name] = distribute_tensor(full, mesh, [Shard(0)], src_data_rank=None)
        target[name] = distribute_tensor(torch.zeros(shape), mesh, [Shard(0)], src_data_rank=None)
        reshard_want[name] = distribute_tensor(full, mesh, resharded, src_data_rank=None).to_local().clone()
        reshard_target[name] = distribute_tensor(torch.zeros(shape), mesh, resharded, src_data_rank=None)
        del full
    my_bytes = sum(t.to_local().nbytes for t in source.values())
    b = torch.tensor([my_bytes], dtype=torch.int64)
    dist.all_reduce(b, op=dist.ReduceOp.MAX)
    bytes_per_rank = int(b.item())

    box = [tempfile.mkdtemp(prefix="torch_dcp_bench_", dir=a.dir) if rank == 0 else None]
    dist.broadcast_object_list(box, src=0)
    base = box[0]
    if rank == 0:
        print(f"torch_dcp: {len(source)} tensors, {bytes_per_rank / 2**20:.1f} MiB per rank (largest rank), {world} "
              f"ranks, {torch.get_num_threads()} thread(s) per rank, folder {base}", file=sys.stderr, flush=True)

    times = {op: [] for op in OPS}

    def record(rnd, op, secs):
        t = torch.tensor([secs], dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        if rnd >= a.warmup:
            times[op].append(t.item())

    def timed(fn):
        dist.barrier()
        t0 = time.perf_counter()
        fn()
        return time.perf_counter() - t0

    def zero(sd):
        for t in sd.values():
            t.to_local().zero_()

    def check(sd, want, op):
        for name, t in sd.items():
            w = want[name].to_local() if isinstance(want[name], DTensor) else want[name]
            if not torch.equal(t.to_local(), w):
                raise RuntimeError(f"torch_dcp: {op} gave other values than were saved for {name!r}")

    for rnd in range(a.rounds):
        save_dir, async_dir = os.path.join(base, f"save-{rnd}"), os.path.join(base, f"async-{rnd}")
        record(rnd, "save", timed(lambda: dcp.save(source, checkpoint_id=save_dir)))

        call = [0.0]

        def save_async():
            t0 = time.perf_counter()
            f = dcp.async_save(source, checkpoint_id=async_dir)
            call[0] = time.perf_counter() - t0
            (f if isinstance(f, Future) else f.upload_completion).result()

        total = timed(save_async)
        record(rnd, "save_async_call", call[0])
        record(rnd, "save_async", total)

        zero(target)
        record(rnd, "load", timed(lambda: dcp.load(target, checkpoint_id=save_dir)))
        check(target, source, "load")
        zero(reshard_target)
        record(rnd, "load_reshard", timed(lambda: dcp.load(reshard_target, checkpoint_id=save_dir)))
        check(reshard_target, reshard_want, "load_reshard")

        dist.barrier()
        if rank == 0:
            shutil.rmtree(save_dir, ignore_errors=True)
            shutil.rmtree(async_dir, ignore_errors=True)
            done = " ".join(f"{op} {v[-1]:.4f} s" for op, v in times.items() if v and rnd >= a.warmup)
            print(f"torch_dcp: round {rnd}: {done or '(warm-up)'}", file=sys.stderr, flush=True)
        dist.barrier()

    if rank == 0:
        shutil.rmtree(base, ignore_errors=True)
        for op in OPS:
            t = statistics.median(times[op])
            print(json.dumps({"bench": "checkpoint", "impl": "torch-dcp", "op": op,
                              "state": "synthetic" if a.mb > 0 else "mlp", "ranks": world,
                              "bytes_per_rank": bytes_per_rank, "time_s": round(t, 6),
                              "gbs_per_rank": round(bytes_per_rank / t / 1e9, 4), "rounds": len(times[op]),
                              "samples_s": [round(x, 6) for x in times[op]], "threads": torch.get_num_threads()}),
                  flush=True)
    dist.barrier()
    dist.destroy_process_group()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
