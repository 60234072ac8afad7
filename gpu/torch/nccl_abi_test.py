#!/usr/bin/env python3
"""PyTorch's NCCL backend on VCCL-Go's libnccl.so.2, unmodified.

Run under torchrun with the library preloaded (torch's RPATH points at its
own libnccl, so LD_PRELOAD is how a program picks VCCL's):

    LD_PRELOAD=$PWD/gpubin/nccl/lib/libnccl.so.2 \\
      torchrun --standalone --nproc_per_node=2 gpu/torch/nccl_abi_test.py --phase ops

Phases:
  ops   every collective PyTorch's NCCL backend offers (all_reduce of every
        reduction and datatype, all_gather_into_tensor, reduce_scatter_tensor,
        broadcast, reduce, all_to_all_single with equal and unequal splits,
        send/recv and batched isend/irecv, barrier, a subgroup), each checked
        exactly against a CPU reference built from every rank's input;
        with VCCL_TELEMETRY=1 and VCCL_TELEMETRY_DIR, rank 0 also reads
        every rank's /metrics and runs vccl-top on the job (VCCL_TOP=path).
  ddp   a small DistributedDataParallel model trains a few steps from a fixed
        seed (float32, deterministic kernels); each rank writes its losses and
        a checksum of its parameters to --out (JSON), to compare with a run on
        another backend (--backend: nccl, or gloo where torch's own NCCL cannot
        run, as with two ranks on one GPU).
Exits non-zero when a check fails.
"""
import argparse
import ctypes
import glob
import hashlib
import json
import os
import re
import subprocess
import sys
import time
import urllib.request

import torch
import torch.distributed as dist

RANK = int(os.environ.get("RANK", "0"))
WORLD = int(os.environ.get("WORLD_SIZE", "1"))
LOCAL = int(os.environ.get("LOCAL_RANK", str(RANK)))


def log(*a):
    print(f"[{RANK}]", *a, flush=True)


def nccl_in_process():
    """The NCCL version the process resolves first (LD_PRELOAD's library)."""
    try:
        v = ctypes.c_int()
        ctypes.CDLL(None).ncclGetVersion(ctypes.byref(v))
        return v.value
    except (AttributeError, OSError):
        return None


def rank_input(r, n, dtype, salt):
    """Rank r's input: reproducible on every rank (the CPU reference)."""
    g = torch.Generator().manual_seed(1000003 * salt + 7919 * r + n)
    if dtype.is_floating_point:
        x = torch.randn(n, generator=g, dtype=torch.float64) * 8
        return x.to(dtype)
    if dtype == torch.uint8:
        return torch.randint(0, 255, (n,), generator=g, dtype=torch.int64).to(dtype)
    return torch.randint(-1000, 1000, (n,), generator=g, dtype=torch.int64).to(dtype)


def fold(xs, op):
    """The reduction in rank order, element type rounding at every step, as
    VCCL computes it (left to right, avg dividing the sum once)."""
    acc = xs[0].clone()
    for x in xs[1:]:
        if op in ("sum", "avg"):
            acc = acc + x
        elif op == "prod":
            acc = acc * x
        elif op == "max":
            acc = torch.maximum(acc, x)
        elif op == "min":
            acc = torch.minimum(acc, x)
    if op == "avg":
        if acc.dtype.is_floating_point:
            acc = (acc.double() / len(xs)).to(acc.dtype)
        else:
            acc = torch.div(acc, len(xs), rounding_mode="trunc")
    return acc


REDOPS = {"sum": dist.ReduceOp.SUM, "avg": dist.ReduceOp.AVG, "prod": dist.ReduceOp.PRODUCT,
          "max": dist.ReduceOp.MAX, "min": dist.ReduceOp.MIN}


class Checks:
    def __init__(self):
        self.n = 0
        self.failed = []

    def __call__(self, name, got, want):
        self.n += 1
        got = got.cpu()
        if got.dtype != want.dtype or got.shape != want.shape or not torch.equal(got, want):
            diff = (got.double() - want.double()).abs().max().item() if got.shape == want.shape else None
            self.failed.append(name)
            log(f"FAIL {name}: max abs diff {diff}")


def ops(args):
    dev = torch.device("cuda", LOCAL % torch.cuda.device_count())
    torch.cuda.set_device(dev)
    dist.init_process_group(args.backend)
    log(f"backend {dist.get_backend()}, torch.cuda.nccl.version() {torch.cuda.nccl.version()}, "
        f"ncclGetVersion in this process {nccl_in_process()}, device {dev}")
    check = Checks()
    t0 = time.time()
    sizes = [1, 7, 1023, (1 << 20) + 5]
    dtypes = [torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int32, torch.int64,
              torch.int8, torch.uint8]
    for dtype in dtypes:
        for n in sizes:
            for opname in ["sum", "avg", "max", "min"] + (["prod"] if n <= 1023 else []):
                if opname == "avg" and not dtype.is_floating_point:
                    continue  # PyTorch refuses AVG on integers
                xs = [rank_input(r, n, dtype, 1) for r in range(WORLD)]
                t = xs[RANK].to(dev)
                dist.all_reduce(t, op=REDOPS[opname])
                check(f"all_reduce {opname} {dtype} n={n}", t, fold(xs, opname))
    log(f"all_reduce: {check.n} cases, {len(check.failed)} failed, {time.time() - t0:.1f} s")

    for dtype in [torch.float32, torch.bfloat16, torch.int32]:
        for n in [3, 4096, (1 << 18) + 1]:
            xs = [rank_input(r, n, dtype, 2) for r in range(WORLD)]
            out = torch.empty(WORLD * n, dtype=dtype, device=dev)
            dist.all_gather_into_tensor(out, xs[RANK].to(dev))
            check(f"all_gather_into_tensor {dtype} n={n}", out, torch.cat(xs))
            lst = [torch.empty(n, dtype=dtype, device=dev) for _ in range(WORLD)]
            dist.all_gather(lst, xs[RANK].to(dev))
            check(f"all_gather list {dtype} n={n}", torch.cat([x.cpu() for x in lst]), torch.cat(xs))

            ins = [rank_input(r, WORLD * n, dtype, 3) for r in range(WORLD)]
            for opname in ["sum", "max"] + (["avg"] if dtype.is_floating_point else []):
                out = torch.empty(n, dtype=dtype, device=dev)
                dist.reduce_scatter_tensor(out, ins[RANK].to(dev), op=REDOPS[opname])
                want = fold([x[RANK * n:(RANK + 1) * n] for x in ins], opname)
                check(f"reduce_scatter_tensor {opname} {dtype} n={n}", out, want)

            root = WORLD - 1
            t = xs[RANK].to(dev)
            dist.broadcast(t, src=root)
            check(f"broadcast {dtype} n={n}", t, xs[root])

            t = xs[RANK].to(dev)
            dist.reduce(t, dst=0, op=dist.ReduceOp.SUM)
            if RANK == 0:
                check(f"reduce {dtype} n={n}", t, fold(xs, "sum"))

            ins = [rank_input(r, WORLD * n, dtype, 4) for r in range(WORLD)]
            out = torch.empty(WORLD * n, dtype=dtype, device=dev)
            dist.all_to_all_single(out, ins[RANK].to(dev))
            want = torch.cat([ins[q][RANK * n:(RANK + 1) * n] for q in range(WORLD)])
            check(f"all_to_all_single {dtype} n={n}", out, want)

    # Unequal splits: rank r sends (r + q + 1) * 100 elements to rank q.
    def split(r, q):
        return (r + q + 1) * 100
    ins = [rank_input(r, sum(split(r, q) for q in range(WORLD)), torch.float32, 5) for r in range(WORLD)]
    out = torch.empty(sum(split(q, RANK) for q in range(WORLD)), device=dev)
    dist.all_to_all_single(out, ins[RANK].to(dev), output_split_sizes=[split(q, RANK) for q in range(WORLD)],
                           input_split_sizes=[split(RANK, q) for q in range(WORLD)])
    parts = []
    for q in range(WORLD):
        off = sum(split(q, p) for p in range(RANK))
        parts.append(ins[q][off:off + split(q, RANK)])
    check("all_to_all_single unequal splits", out, torch.cat(parts))

    # Point to point: a ring, blocking, then batched.
    n = 100003
    xs = [rank_input(r, n, torch.float32, 6) for r in range(WORLD)]
    nxt, prv = (RANK + 1) % WORLD, (RANK - 1) % WORLD
    got = torch.empty(n, device=dev)
    if RANK % 2 == 0:
        dist.send(xs[RANK].to(dev), nxt)
        dist.recv(got, prv)
    else:
        dist.recv(got, prv)
        dist.send(xs[RANK].to(dev), nxt)
    check("send/recv ring", got, xs[prv])
    got = torch.empty(n, device=dev)
    reqs = dist.batch_isend_irecv([dist.P2POp(dist.isend, xs[RANK].to(dev), nxt),
                                   dist.P2POp(dist.irecv, got, prv)])
    for r in reqs:
        r.wait()
    check("batch_isend_irecv ring", got, xs[prv])

    dist.barrier()
    big = 64 << 20
    xs = [rank_input(r, 1024, torch.float32, 7) for r in range(WORLD)]
    t = xs[RANK].repeat(big // 1024).to(dev)
    dist.all_reduce(t)
    check("all_reduce 256 MiB float32", t[-1024:], fold(xs, "sum"))

    # A subgroup of every rank (a communicator of its own).
    sub = dist.new_group(list(range(WORLD)))
    xs = [rank_input(r, 4097, torch.float32, 8) for r in range(WORLD)]
    t = xs[RANK].to(dev)
    dist.all_reduce(t, group=sub)
    check("all_reduce on a new group", t, fold(xs, "sum"))
    torch.cuda.synchronize()
    log(f"{check.n} checks, {len(check.failed)} failed, {time.time() - t0:.1f} s")

    if RANK == 0 and os.environ.get("VCCL_TELEMETRY") == "1" and os.environ.get("VCCL_TELEMETRY_DIR"):
        telemetry_checks(check)
    dist.barrier()
    dist.destroy_process_group()
    if check.failed:
        log("FAILED:", ", ".join(check.failed[:20]))
        sys.exit(1)
    log("PASS")


def telemetry_checks(check):
    d = os.environ["VCCL_TELEMETRY_DIR"]
    path = os.path.join(d, "endpoints.json")
    deadline = time.time() + 15
    addrs = []
    while time.time() < deadline and not addrs:
        if os.path.exists(path):
            addrs = sorted(set(re.findall(r"\d+\.\d+\.\d+\.\d+:\d+", open(path).read())))
        time.sleep(0.2)
    log(f"telemetry: endpoints {addrs}, traces {sorted(os.path.basename(p) for p in glob.glob(os.path.join(d, '*.arrow')))}")
    check.n += 1
    if not addrs:
        check.failed.append("telemetry endpoints")
        return
    for a in addrs:
        try:
            body = urllib.request.urlopen(f"http://{a}/metrics", timeout=5).read().decode()
            lines = [l for l in body.splitlines() if l.startswith("vccl_") and "bytes" in l][:3]
            log(f"telemetry: {a}/metrics: {len(body)} bytes, e.g. {lines}")
            if "vccl_" not in body:
                check.failed.append(f"metrics of {a}")
        except Exception as e:  # noqa: BLE001
            check.failed.append(f"metrics of {a}")
            log(f"telemetry: {a}: {e}")
    top = os.environ.get("VCCL_TOP")
    if top:
        r = subprocess.run([top, "--dir", d, "--once", "--output", "table"], capture_output=True, text=True,
                           timeout=60)
        log(f"vccl-top --dir --once (exit {r.returncode}):\n{r.stdout[-3000:]}{r.stderr[-1000:]}")
        if r.returncode != 0:
            check.failed.append("vccl-top")


def ddp(args):
    from torch.nn.parallel import DistributedDataParallel as DDP
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.use_deterministic_algorithms(True)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dev = torch.device("cuda", LOCAL % torch.cuda.device_count())
    torch.cuda.set_device(dev)
    dist.init_process_group(args.backend)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 256),
                                torch.nn.ReLU(), torch.nn.Linear(256, 10)).to(dev)
    net = DDP(model, device_ids=[dev.index])
    opt = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)
    losses = []
    for step in range(args.steps):
        g = torch.Generator().manual_seed(100 * RANK + step)
        x = torch.randn(32, 64, generator=g).to(dev)
        y = torch.randint(0, 10, (32,), generator=g).to(dev)
        loss = torch.nn.functional.cross_entropy(net(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    h = hashlib.sha256()
    for p in model.parameters():
        h.update(p.detach().cpu().numpy().tobytes())
    res = {"rank": RANK, "backend": args.backend, "nccl": nccl_in_process(),
           "losses": [float.hex(v) for v in losses], "params_sha256": h.hexdigest()}
    log(f"ddp {args.backend}: losses {[round(v, 6) for v in losses]} params {h.hexdigest()[:16]}")
    if args.out:
        with open(f"{args.out}.rank{RANK}.json", "w") as f:
            json.dump(res, f)
    dist.barrier()
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--phase", choices=["ops", "ddp"], default="ops")
    ap.add_argument("--backend", default="nccl")
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    {"ops": ops, "ddp": ddp}[args.phase](args)


if __name__ == "__main__":
    main()
