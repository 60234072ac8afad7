#!/usr/bin/python3
"""Gloo peer benchmark: torch.distributed's gloo backend on CPU tensors, in
the mould of nccl-tests and vccl-bench (same sweep, timing and columns).

Run one process per rank with the torchrun environment (RANK, WORLD_SIZE,
MASTER_ADDR, MASTER_PORT), e.g. under vcclrun:

    vcclrun -n 2 --tag-output=false -- /usr/bin/python3 bench/gloo/bench.py allreduce -b 1K -e 64M -f 4

Debian's python3-torch lives in /usr/bin/python3's site-packages. float32 and
sum only; out of place for all-gather, in place for all-reduce and broadcast
(torch.distributed has no other form).
"""
import argparse
import os
import re
import sys
import time


def parse_size(s):
    m = re.fullmatch(r"(\d+)\s*([kKmMgG]?)(i?[bB])?", s.strip())
    if not m:
        raise argparse.ArgumentTypeError(f"bad size {s!r} (want e.g. 8, 64K, 16M)")
    return int(m.group(1)) << {"": 0, "k": 10, "m": 20, "g": 30}[m.group(2).lower()]


def sizes(lo, hi, factor):
    out = [lo]
    if lo == hi or factor <= 1:
        return out
    s = lo
    while True:
        nxt = int(s * factor)
        if nxt <= s:
            nxt = s + 1
        if nxt > hi:
            return out
        out.append(nxt)
        s = nxt


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("collective", choices=["allreduce", "allgather", "broadcast"])
    ap.add_argument("-b", type=parse_size, default=1 << 10, help="smallest size in bytes")
    ap.add_argument("-e", type=parse_size, default=1 << 20, help="largest size in bytes")
    ap.add_argument("-f", type=float, default=2, help="size factor between steps")
    ap.add_argument("-n", type=int, default=20, help="timed iterations")
    ap.add_argument("-w", type=int, default=5, help="warm-up iterations")
    ap.add_argument("-c", type=int, default=1, choices=[0, 1], help="check results")
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads per rank")
    a = ap.parse_args()
    if a.n < 1 or a.b > a.e:
        ap.error("bad sweep")

    import torch
    import torch.distributed as dist

    torch.set_num_threads(a.threads)
    dist.init_process_group("gloo", init_method="env://")
    rank, n = dist.get_rank(), dist.get_world_size()
    coll = a.collective
    busfactor = {"allreduce": 2 * (n - 1) / n, "allgather": (n - 1) / n, "broadcast": 1.0}[coll]
    wide = coll != "allreduce"

    def value(p, count, offset=0):
        j = torch.arange(offset, offset + count, dtype=torch.int64)
        h = j * 7 + p * 131
        return ((h % 251) - 125 if wide else (h % 9) - 4).to(torch.float32)

    if rank == 0:
        print(f"# {coll} (gloo, torch {torch.__version__}): {n} ranks  minBytes {a.b} maxBytes {a.e} "
              f"step: {a.f:g}(factor) warmup iters: {a.w} iters: {a.n} validation: {a.c}")
        hdr = "# {:>10}  {:>12}  {:>8}  {:>6}  {:>6}  {:>7}  {:>6}  {:>6}  {:>6}"
        print(hdr.format("size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong"))
        print(hdr.format("(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", ""))
        sys.stdout.flush()
    bwsum, total_wrong, rows = 0.0, 0, 0
    for size in sizes(a.b, a.e, a.f):
        if coll == "allgather":
            count = size // 4 // n
            nbytes = count * n * 4
            send = torch.zeros(count, dtype=torch.float32)
            recv = [torch.zeros(count, dtype=torch.float32) for _ in range(n)]
            run = lambda: dist.all_gather(recv, send)
        else:
            count = size // 4
            nbytes = count * 4
            buf = torch.zeros(count, dtype=torch.float32)
            if coll == "allreduce":
                run = lambda: dist.all_reduce(buf, op=dist.ReduceOp.SUM)
            else:
                run = lambda: dist.broadcast(buf, src=0)
        for _ in range(a.w):
            run()
        dist.barrier()
        t0 = time.perf_counter()
        for _ in range(a.n):
            run()
        us = torch.tensor([(time.perf_counter() - t0) * 1e6 / a.n], dtype=torch.float64)
        dist.all_reduce(us)
        us = us.item() / n
        algbw = nbytes / (us * 1e3) if us > 0 else 0.0
        busbw = algbw * busfactor
        wrong = "N/A"
        if a.c:
            if coll == "allgather":
                send.copy_(value(rank, count))
                for t in recv:
                    t.fill_(float("nan"))
                run()
                bad = sum(int((recv[p] != value(p, count)).sum()) for p in range(n))
            elif coll == "allreduce":
                buf.copy_(value(rank, count))
                run()
                want = sum(value(p, count) for p in range(n))
                bad = int((buf != want).sum())
            else:
                buf.copy_(value(0, count) if rank == 0 else torch.full((count,), float("nan")))
                run()
                bad = int((buf != value(0, count)).sum())
            t = torch.tensor([bad], dtype=torch.int64)
            dist.all_reduce(t)
            wrong = int(t.item())
            total_wrong += wrong
        if rank == 0:
            ts = f"{us:7.0f}" if us >= 10000 else f"{us:7.1f}" if us >= 100 else f"{us:7.2f}"
            print(f"{nbytes:12d}  {count:12d}  {'float32':>8}  {'sum' if coll == 'allreduce' else 'none':>6}  "
                  f"{0 if coll == 'broadcast' else -1:6d}  {ts:>7}  {algbw:6.2f}  {busbw:6.2f}  {wrong!s:>6}")
            sys.stdout.flush()
        bwsum += busbw
        rows += 1
    if rank == 0:
        if a.c:
            print(f"# Out of bounds values : {total_wrong} {'FAILED' if total_wrong else 'OK'}")
        print(f"# Avg bus bandwidth    : {bwsum / rows:g} \n#")
    dist.destroy_process_group()
    return 1 if total_wrong else 0


if __name__ == "__main__":
    sys.exit(main())
