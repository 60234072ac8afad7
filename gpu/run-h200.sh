#!/bin/bash
# The GPU run behind BENCHMARKS.md's GPU section. Build here (no Go on the
# GPU machine), into the ignored folder gpubin/ (vccl-gpubench and nvml.test
# with cgo, for NVML; a binary built on Debian 12 runs there):
#
#   F='-ldflags=-s -w'
#   go build "$F" -o gpubin/vccl-gpubench ./cmd/vccl-gpubench
#   go test -c "$F" -o gpubin/nvml.test ./gpu/nvml
#   CGO_ENABLED=0 go build "$F" -o gpubin/vcclrun ./cmd/vcclrun
#   CGO_ENABLED=0 go test -c "$F" -o gpubin/cuda.test ./gpu/cuda
#   CGO_ENABLED=0 go test -c "$F" -o gpubin/ce.test ./gpu/ce
#
# then, on a machine with 2 GPUs joined by NVLink, from the repository root
# with gpubin/ carried along:  bash gpu/run-h200.sh
# Results go to $OUT (or /tmp/vccl-gpu). NVLink multicast stays off.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
OUT=${OUT:-/tmp/vccl-gpu}
mkdir -p "$OUT"
cd "$(dirname "$0")/../gpubin" || exit 1
NL=${VCCL_NCCL_LIB:-$(find /opt /usr -name 'libnccl.so.2' 2>/dev/null | head -1)}
nvidia-smi topo -m > "$OUT/topo.txt" 2>&1
T0=$SECONDS
echo "=== tests"
{
timeout 60 ./cuda.test -test.v 2>&1 | grep -E "^(=== RUN|--- |PASS|FAIL|ok)|FAIL" | head -20
timeout 60 ./nvml.test -test.v 2>&1 | grep -vE "^\s*$" | head -30
timeout 300 ./ce.test -test.v 2>&1 | grep -vE "^\s+(ce|proc)_test.go:[0-9]+: (ok |proc check rank)|^\s*$" | head -60
} 2>&1 | tee "$OUT/tests.txt"
echo "tests took $((SECONDS-T0)) s"
echo "=== two processes (vcclrun -n 2)"
timeout 180 ./vcclrun -n 2 -- ./vccl-gpubench -proc 2>&1 | tee "$OUT/proc.txt"
echo "proc rc=${PIPESTATUS[0]} at $((SECONDS-T0)) s"
echo "=== bench"
VCCL_NCCL_LIB=$NL timeout 300 ./vccl-gpubench -bench "$@" > "$OUT/bench.txt" 2>&1
echo "bench rc=$? at $((SECONDS-T0)) s"
cat "$OUT/bench.txt"
