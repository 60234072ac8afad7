#!/usr/bin/env python3
"""Prints bench/host.sh's raw outputs as the Markdown tables of BENCHMARKS.md's
section "All the cores of a host", one an operation: per world size and
size, VCCL-Go's and Gloo's busbw (medians over the repetitions; in place,
but an all-gather out of place, as Gloo's benchmark runs it), their ratio,
and for the all-reduce VCCL-Go against the memory-bandwidth bound of the
same run; with host.sh -s, VCCL-Go with buffers its peers map
(--device shared) in columns of its own. Outputs of runs before host.sh's
-o (vccl-W-R.txt) read as all-reduces.

The bound: a reduce-scatter by slices and an all-gather in which each rank
reads its peers' memory once move (3 - 1/W) bytes of memory traffic per
payload byte per rank (read the W slices of one's own block, write it;
read and write the W - 1 other blocks), so with the W threads' summed
read + write rate M (bench/membw.c), the busbw bound is
2(W-1)/W x M / (W (3 - 1/W)) = 2(W-1) M / (W (3W - 1)).

    bench/host_report.py OUTDIR
"""
import glob
import os
import re
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from report import hsize, parse  # noqa: E402


def membw(out, w):
    try:
        with open(os.path.join(out, f"membw-{w}.txt")) as f:
            m = re.search(r"([\d.]+) GB/s read \+ written together", f.read())
            return float(m.group(1)) if m else None
    except OSError:
        return None


def bound(w, m):
    return 2 * (w - 1) * m / (w * (3 * w - 1))


def outputs(out, tool, op, w):
    paths = glob.glob(os.path.join(out, f"{tool}-{op}-{w}-*.txt"))
    if op == "allreduce":
        paths += glob.glob(os.path.join(out, f"{tool}-{w}-*.txt"))
    return sorted(paths)


def medians(out, tool, op, w):
    per = {}
    for path in outputs(out, tool, op, w):
        rows, failed = parse(path)
        if failed:
            print(f"<!-- {os.path.basename(path)}: FAILED -->")
        for size, r in rows.items():
            # Gloo prints its one call in the first columns.
            if op == "allgather" or tool == "gloo":
                m = r.get("oop")
            else:
                m = r.get("ip") or r.get("oop")
            if m is None:
                continue
            if m["wrong"] not in ("0", "N/A"):
                print(f"<!-- {os.path.basename(path)}: {size} B had {m['wrong']} wrong -->")
            per.setdefault(size, []).append(m["busbw"])
    return {s: statistics.median(v) for s, v in per.items()}


def main():
    out = sys.argv[1]
    runs = {}  # op -> world sizes
    for p in glob.glob(os.path.join(out, "vccl-*.txt")):
        m = re.match(r"vccl-(?:([a-z]+)-)?(\d+)-\d+\.txt$", os.path.basename(p))
        if m:
            runs.setdefault(m.group(1) or "allreduce", set()).add(int(m.group(2)))
    with open(os.path.join(out, "host.txt")) as f:
        for line in f:
            print(f"- {line.strip()}")
    for op in sorted(runs, key=lambda o: (o != "allreduce", o)):
        print()
        print(f"{op}:")
        print()
        shared = any(medians(out, "vcclshared", op, w) for w in runs[op])
        head = ["ranks", "size", "VCCL-Go busbw GB/s", "Gloo busbw GB/s", "VCCL/Gloo"]
        if op == "allreduce":
            head += ["memory bound busbw GB/s (membw, W threads)", "VCCL/bound"]
        if shared:
            head += ["VCCL-Go, shared buffers, GB/s", "shared/Gloo"] + (["shared/bound"] if op == "allreduce" else [])
        print("| " + " | ".join(head) + " |")
        print("|" + " ---: |" * len(head))
        for w in sorted(runs[op]):
            v, g = medians(out, "vccl", op, w), medians(out, "gloo", op, w)
            vs = medians(out, "vcclshared", op, w)
            m = membw(out, w) if op == "allreduce" else None
            b = bound(w, m) if m else None
            for size in sorted(v):
                cells = [str(w), hsize(size), f"{v[size]:.2f}",
                         f"{g[size]:.2f}" if size in g else "-",
                         f"{v[size] / g[size]:.2f}×" if g.get(size) else "-"]
                if op == "allreduce":
                    cells += [f"{b:.2f} ({m:.0f} GB/s)" if b else "-", f"{v[size] / b:.0%}" if b else "-"]
                if shared:
                    s = vs.get(size)
                    cells += [f"{s:.2f}" if s else "-", f"{s / g[size]:.2f}×" if s and g.get(size) else "-"]
                    if op == "allreduce":
                        cells.append(f"{s / b:.0%}" if s and b else "-")
                print("| " + " | ".join(cells) + " |")

if __name__ == "__main__":
    main()
