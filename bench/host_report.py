#!/usr/bin/env python3
"""Prints bench/host.sh's raw outputs as the Markdown table of BENCHMARKS.md's
section "All the cores of a host": per world size and size, VCCL-Go's and
Gloo's in-place all-reduce busbw (medians over the repetitions), their ratio,
and VCCL-Go against the memory-bandwidth bound of the same run.

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


def medians(out, tool, w):
    per = {}
    for path in sorted(glob.glob(os.path.join(out, f"{tool}-{w}-*.txt"))):
        rows, failed = parse(path)
        if failed:
            print(f"<!-- {os.path.basename(path)}: FAILED -->")
        for size, r in rows.items():
            m = r.get("ip") or r.get("oop")  # Gloo prints its in-place call in the first columns
            if m is None:
                continue
            if m["wrong"] not in ("0", "N/A"):
                print(f"<!-- {os.path.basename(path)}: {size} B had {m['wrong']} wrong -->")
            per.setdefault(size, []).append(m["busbw"])
    return {s: statistics.median(v) for s, v in per.items()}


def main():
    out = sys.argv[1]
    worlds = sorted({int(re.match(r"vccl-(\d+)-", os.path.basename(p)).group(1))
                     for p in glob.glob(os.path.join(out, "vccl-*-*.txt"))})
    with open(os.path.join(out, "host.txt")) as f:
        for line in f:
            print(f"- {line.strip()}")
    print()
    print("| ranks | size | VCCL-Go busbw GB/s | Gloo busbw GB/s | VCCL/Gloo | memory bound busbw GB/s (membw, W threads) | VCCL/bound |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for w in worlds:
        v, g, m = medians(out, "vccl", w), medians(out, "gloo", w), membw(out, w)
        for size in sorted(v):
            b = bound(w, m) if m else None
            gs = f"{g[size]:.2f}" if size in g else "-"
            rs = f"{v[size] / g[size]:.2f}×" if g.get(size) else "-"
            bs = f"{b:.2f} ({m:.0f} GB/s)" if b else "-"
            fs = f"{v[size] / b:.0%}" if b else "-"
            print(f"| {w} | {hsize(size)} | {v[size]:.2f} | {gs} | {rs} | {bs} | {fs} |")


if __name__ == "__main__":
    main()
