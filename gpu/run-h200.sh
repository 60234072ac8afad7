#!/bin/bash
# The GPU run behind BENCHMARKS.md's GPU section. Build here (no Go on the
# GPU machine), into the ignored folder gpubin/ (vccl-gpubench and nvml.test
# with cgo, for NVML; a binary built on Debian 12 runs there):
#
#   F='-ldflags=-s -w'
#   go build "$F" -o gpubin/vccl-gpubench ./cmd/vccl-gpubench
#   go test -c "$F" -o gpubin/nvml.test ./gpu/nvml
#   CGO_ENABLED=0 go build "$F" -o gpubin/vcclrun ./cmd/vcclrun
#   CGO_ENABLED=0 go build "$F" -o gpubin/vccl-bench ./cmd/vccl-bench
#   CGO_ENABLED=0 go test -c "$F" -o gpubin/cuda.test ./gpu/cuda
#   CGO_ENABLED=0 go test -c "$F" -o gpubin/ce.test ./gpu/ce
#   CGO_ENABLED=0 go test -c "$F" -o gpubin/kernels.test ./gpu/kernels
#
# then, on a machine with 2 GPUs joined by NVLink, from the repository root
# with gpubin/ carried along:  bash gpu/run-h200.sh [quick]
# Results go to $OUT (or /tmp/vccl-gpu), at most 8 files. NVLink multicast
# stays off.
#
# What it runs: the GPU tests (one process: every datatype x reduction on
# the Group; two processes: TestProc), then under vcclrun -n 2 (one process
# per GPU): vccl-gpubench -proc -check (every collective x datatype through
# the collective API on device buffers, every all-reduce path, against the
# host reference; then again staged through host memory with
# VCCL_GPU_STAGE=1), vccl-bench --device gpu --vs-nccl for every
# collective (NCCL through ncclCommInitRank on the same buffers), and
# telemetry off/on alternating five times.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
OUT=${OUT:-/tmp/vccl-gpu}
mkdir -p "$OUT"
cd "$(dirname "$0")/../gpubin" || exit 1
export VCCL_NCCL_LIB=${VCCL_NCCL_LIB:-$(find /opt /usr -name 'libnccl.so.2' 2>/dev/null | head -1)}
T0=$SECONDS
# vccl-bench under vcclrun, rank 0's table without the per-rank header lines.
B() { timeout 150 ./vcclrun --quiet -n 2 -- ./vccl-bench "$@" 2>&1 | grep -v "#  Rank\|^#$\|# Using\|(B)  \|out-of-place\|# nThread\|# Collective test"; }
{
	nvidia-smi topo -m
	echo "=== tests"
	timeout 60 ./cuda.test 2>&1 | tail -2
	PX=$(ls /usr/local/cuda*/bin/ptxas 2>/dev/null | head -1)
	[ -n "$PX" ] && VCCL_PTXAS=$PX timeout 120 ./kernels.test -test.run PTX -test.v 2>&1 | grep -E "^(--- |ok|PASS|FAIL)"
	[ "$1" = quick ] || timeout 60 ./nvml.test 2>&1 | tail -2
	[ "$1" = quick ] || timeout 300 ./ce.test -test.v 2>&1 | grep -E "^(--- |ok|PASS|FAIL)|FAIL|cases" | head -40
	echo "tests took $((SECONDS - T0)) s"
	echo "=== collective API on device buffers, two processes"
	timeout 200 ./vcclrun --quiet -n 2 -- ./vccl-gpubench -proc -check 2>&1 | grep -v "^\(\[.\]\)\? *ok" | tail -20
	echo "=== the same, staged through host memory (VCCL_GPU_STAGE=1)"
	VCCL_GPU_STAGE=1 timeout 200 ./vcclrun -n 2 -- ./vccl-gpubench -proc -check 2>&1 | tail -6
	echo "checks done at $((SECONDS - T0)) s"
} > "$OUT/checks.txt" 2>&1
B allreduce --device gpu --vs-nccl -b 4K -e 1G -f 4 -n 50 -w 10 > "$OUT/allreduce.txt"
B sendrecv --device gpu --vs-nccl -b 4K -e 256M -f 4 -n 20 -w 5 > "$OUT/sendrecv.txt"
for c in reducescatter reduce broadcast allgather alltoall; do
	B $c --device gpu --vs-nccl -b 4K -e 256M -f 16 -n 20 -w 5
done > "$OUT/others.txt"
{
	for s in 8 32; do echo "--- --sms $s"; B allreduce --device gpu -c 0 --sms $s -b 4M -e 256M -f 4 -n 50 -w 10; done
} > "$OUT/sms.txt"
for i in 1 2 3 4 5; do
	for t in off on; do
		echo "--- telemetry $t"
		B allreduce --device gpu --telemetry $t -c 0 -b 1M -e 64M -f 4 -n 200 -w 20
		B sendrecv --device gpu --telemetry $t -c 0 -b 1M -e 256M -f 256 -n 50 -w 10
	done
done > "$OUT/telemetry.txt"
echo "all done at $((SECONDS - T0)) s"
cat "$OUT/checks.txt" "$OUT/allreduce.txt" "$OUT/sendrecv.txt"
# VCCL as libnccl.so.2 (nccl-tests, PyTorch): gpu/run-nccl-abi.sh, with the
# gpubin/ that gpu/build-nccl-abi.sh makes. Its files go to $OUT/abi/.
# ($OUT takes 8 files: the run's go into one.)
if [ -f nccl/lib/libnccl.so.2 ]; then
	OUT=/tmp/vccl-abi bash ../gpu/run-nccl-abi.sh all >/dev/null 2>&1
	cat /tmp/vccl-abi/*.txt >"$OUT/nccl-abi.txt"
fi
