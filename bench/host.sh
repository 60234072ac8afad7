#!/bin/bash
# Collectives across the cores of one host, VCCL-Go (shared memory) against
# Gloo (torch.distributed on CPU tensors), with the host's memory bandwidth
# measured in the same run: the BENCHMARKS.md section "All the cores of a
# host". Needs the Go binaries in bin/ (go build -o bin/ ./cmd/vcclrun
# ./cmd/vccl-bench), a C compiler, and python3 with torch for Gloo
# (PYTHON=...; skipped if it has none).
#
#   bench/host.sh [-w "2 8 16"] [-o "allreduce allgather"] [-b 1M] [-e 64M] [-r 3] [-s] OUTDIR
#
# -s runs VCCL-Go a second time with buffers its peers map (vccl-bench
# --device shared: shm.AllocShared, decision 0053), interleaved with the
# first, as the tool "vcclshared".
# -o names the operations (vccl-bench's names; default allreduce); Gloo runs
# those its benchmark has (allreduce, allgather, broadcast). Each (tool,
# operation, ranks) triple runs -r times, interleaved; host_report.py prints
# the medians, a table an operation, the all-reduce's against the memory
# bound. VCCL is compared in place with Gloo's all-reduce and broadcast
# (torch.distributed's only form) and out of place with its all-gather.
set -euo pipefail
worlds="2 8 16" ops=allreduce lo=1M hi=64M reps=3 shared=0
while getopts "w:o:b:e:r:s" o; do
	case $o in
	w) worlds=$OPTARG ;;
	o) ops=$OPTARG ;;
	b) lo=$OPTARG ;;
	e) hi=$OPTARG ;;
	r) reps=$OPTARG ;;
	s) shared=1 ;;
	*) exit 2 ;;
	esac
done
shift $((OPTIND - 1))
out=${1:?usage: bench/host.sh [-w worlds] [-o ops] [-b lo] [-e hi] [-r reps] [-s] OUTDIR}
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
	for op in $ops; do
		for w in $worlds; do
			VCCL_TRANSPORT=shm bin/vcclrun -n "$w" --quiet -- bin/vccl-bench "$op" \
				-b "$lo" -e "$hi" -f 4 -n 20 -w 5 --progress off >"$out/vccl-$op-$w-$r.txt"
			if ((shared)); then
				VCCL_TRANSPORT=shm bin/vcclrun -n "$w" --quiet -- bin/vccl-bench "$op" --device shared \
					-b "$lo" -e "$hi" -f 4 -n 20 -w 5 --progress off >"$out/vcclshared-$op-$w-$r.txt"
			fi
			case "$gloo $op" in
			"1 allreduce" | "1 allgather" | "1 broadcast")
				GLOO_SOCKET_IFNAME=lo bin/vcclrun -n "$w" --quiet --tag-output=false -- \
					"$python" "$here/gloo/bench.py" "$op" -b "$lo" -e "$hi" -f 4 -n 20 -w 5 >"$out/gloo-$op-$w-$r.txt"
				;;
			esac
		done
	done
done
"$python" "$here/host_report.py" "$out"
