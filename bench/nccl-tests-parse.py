#!/usr/bin/python3
"""Parses nccl-tests output (all_reduce_perf and the like, or vccl-bench's,
which prints the same lines) the way scripts written for nccl-tests do: one
regular expression per result row (size, count, type, redop, root, then
time, algbw, busbw and #wrong out of place and in place), and the footer's
"Avg bus bandwidth" and "Out of bounds values" lines. Comment lines (#) are
skipped, and so are lines a launcher prefixed ("[0] ..."): those are not
nccl-tests' rows.

    vcclrun -n 2 -- vccl-bench allreduce -b 8 -e 64M -f 4 | bench/nccl-tests-parse.py

prints one JSON object: {"rows": [...], "avg_busbw": ..., "out_of_bounds": ...}.
cmd/vccl-bench's tests run it on vccl-bench's table and compare its figures
with vccl-bench --json-file's.
"""
import json
import re
import sys

NUM = r"(\d+(?:\.\d+)?(?:e[+-]?\d+)?)"
WRONG = r"(\d+|N/A)"
ROW = re.compile(
    r"^\s*(\d+)\s+(\d+)\s+(\w+)\s+(\w+)\s+(-?\d+)"
    + (r"\s+" + NUM) * 3 + r"\s+" + WRONG
    # in place, or N/A where the tool has no in-place form (vccl-bench's sendrecv)
    + r"(?:" + (r"\s+" + NUM) * 3 + r"\s+" + WRONG + r"|(?:\s+N/A){4})?\s*$"
)
AVG = re.compile(r"^# Avg bus bandwidth\s*:\s*" + NUM)
BOUNDS = re.compile(r"^# Out of bounds values\s*:\s*(\d+)\s+(OK|FAILED)")


def measure(fields):
    if fields[0] is None:
        return None
    time, algbw, busbw, wrong = fields
    return {"time_us": float(time), "algbw_gbps": float(algbw), "busbw_gbps": float(busbw),
            "wrong": None if wrong == "N/A" else int(wrong)}


def parse(lines):
    out = {"rows": [], "avg_busbw": None, "out_of_bounds": None}
    for line in lines:
        if m := AVG.match(line):
            out["avg_busbw"] = float(m.group(1))
        elif m := BOUNDS.match(line):
            out["out_of_bounds"] = int(m.group(1))
        elif m := ROW.match(line):
            g = m.groups()
            out["rows"].append({
                "size": int(g[0]), "count": int(g[1]), "type": g[2], "redop": g[3], "root": int(g[4]),
                "out_of_place": measure(g[5:9]), "in_place": measure(g[9:13]),
            })
    return out


def main():
    src = open(sys.argv[1]) if len(sys.argv) > 1 else sys.stdin
    json.dump(parse(src), sys.stdout, indent=1)
    print()


if __name__ == "__main__":
    main()
