#!/bin/bash
# All-reduce across the cores of one host, VCCL-Go (shared memory) against
# Gloo (torch.distributed on CPU tensors), with the host's memory bandwidth
# measured in the same run: the BENCHMARKS.md section "All the cores of a
# host". Needs the Go binaries in bin/ (go build -o bin/ ./cmd/vcclrun
# ./cmd/vccl-bench), a C compiler, and python3 with torch for Gloo
# (PYTHON=...; skipped if it has none).
#
#   bench/host.sh [-w "2 8 16"] [-b 1M] [-e 64M] [-r 3] OUTDIR
#
# Each (tool, ranks) pair runs -r times, the pairs interleaved; host_report.py
# host mode prints the medians. VCCL is timed in place, as Gloo is.
set -euo pipefail
worlds="2 8 16" lo=1M hi=64M reps=3
while getopts "w:b:e:r:" o; do
	case $o in
	w) worlds=$OPTARG ;;
	b) lo=$OPTARG ;;
	e) hi=$OPTARG ;;
	r) reps=$OPTARG ;;
	*) exit 2 ;;
	esac
done
shift $((OPTIND - 1))
out=${1:?usage: bench/host.sh [-w worlds] [-b lo] [-e hi] [-r reps] OUTDIR}
mkdir -p "$out"
here=$(cd "$(dirname "$0")" && pwd)
python=${PYTHON:-python3}
cc -O2 -Wall -pthread -o "$out/membw" "$here/membw.c"
{
	echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"
	echo "cpus: $(nproc) $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"
	echo "kernel: $(uname -r)"
	echo "load: $(cut -d' ' -f1-3 /proc/loadavg)"
	echo "commit: $(git -C "$here" rev-parse --short HEAD 2>/dev/null || echo unknown)"
} >"$out/host.txt"
for w in $worlds; do "$out/membw" "$w" >"$out/membw-$w.txt"; done
gloo=1
"$python" -c 'import torch.distributed' 2>/dev/null || gloo=0
for r in $(seq "$reps"); do
	for w in $worlds; do
		VCCL_TRANSPORT=shm bin/vcclrun -n "$w" --quiet -- bin/vccl-bench allreduce \
			-b "$lo" -e "$hi" -f 4 -n 20 -w 5 --progress off >"$out/vccl-$w-$r.txt"
		if [ $gloo = 1 ]; then
			GLOO_SOCKET_IFNAME=lo bin/vcclrun -n "$w" --quiet --tag-output=false -- \
				"$python" "$here/gloo/bench.py" allreduce -b "$lo" -e "$hi" -f 4 -n 20 -w 5 >"$out/gloo-$w-$r.txt"
		fi
	done
done
"$python" "$here/host_report.py" "$out"
