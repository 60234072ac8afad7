#!/bin/bash
# VCCL-Go as libnccl.so.2 on a GPU machine: the C ABI test, nccl-tests and
# PyTorch's NCCL backend, unmodified. Build here (no Go on the GPU
# machine), into the ignored folder gpubin/, from the committed tree:
#
#   bash gpu/build-nccl-abi.sh
#
# then, from the repository root with gpubin/ carried along:
#   bash gpu/run-nccl-abi.sh [abi|nccltests|torch|all] [quick]
# nccl-tests is built there against gpubin/nccl (one process per rank
# through the MPI stand-in, gpu/nccltests), unless gpubin/nccl-tests.tgz
# holds a build from an earlier run; the build comes back as
# $OUT/nccl-tests.tgz. Results go to $OUT (or /tmp/vccl-abi): at most 8
# files. NVLink multicast stays off.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
OUT=${OUT:-/tmp/vccl-abi}
mkdir -p "$OUT"
ROOT=$(cd "$(dirname "$0")/.." && pwd)
G=$ROOT/gpubin
WHAT=${1:-all}
QUICK=$2
T0=$SECONDS
NGPU=$(nvidia-smi -L 2>/dev/null | wc -l)
LIB=$G/nccl/lib
ln -sf libnccl.so.2 "$LIB/libnccl.so"
CUDA=${CUDA_HOME:-/usr/local/cuda}
PY=python3
[ -x /opt/torch/.venv/bin/python3 ] && PY=/opt/torch/.venv/bin/python3
# Two ranks; on one GPU both share it (nccl-tests: NCCL_TESTS_DEVICE=0).
N=2
[ "$NGPU" -ge 1 ] || { echo "no GPU"; exit 3; }
[ "$NGPU" -eq 1 ] && export NCCL_TESTS_DEVICE=0

{
	echo "=== machine"
	nvidia-smi -L
	nvidia-smi topo -m 2>/dev/null | head -5
	$CUDA/bin/nvcc --version | tail -2
	$PY -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "nccl", torch.cuda.nccl.version(), "gpus", torch.cuda.device_count())'
	TL=$($PY -c 'import torch, os; print(os.path.join(os.path.dirname(torch.__file__), "lib", "libtorch_cuda.so"))')
	echo "NCCL calls libtorch_cuda.so imports, and which VCCL lacks:"
	nm -D --undefined-only "$TL" | awk '/ nccl/ {print $2}' | sort -u | tr '\n' ' '
	echo
	nm -D --undefined-only "$TL" | awk '/ nccl/ {print $2}' | sed 's/@.*//' | sort -u >/tmp/torch-nccl.txt
	nm -D --defined-only "$LIB/libnccl.so.2" | awk '/ T nccl/ {print $3}' | sort -u >/tmp/vccl-nccl.txt
	echo "missing: $(comm -23 /tmp/torch-nccl.txt /tmp/vccl-nccl.txt | tr '\n' ' ')"
	which mpirun 2>/dev/null
} >"$OUT/info.txt" 2>&1

if [ "$WHAT" = abi ] || [ "$WHAT" = all ]; then
	{
		echo "=== C ABI test (cmd/libnccl/testdata/abi_gpu.c)"
		gcc -std=gnu11 -O2 -Wall -I "$ROOT/cmd/libnccl/include" -I $CUDA/include "$ROOT/cmd/libnccl/testdata/abi_gpu.c" \
			-L "$LIB" -l:libnccl.so.2 -L $CUDA/lib64 -lcudart -Wl,-rpath,"$LIB" -o /tmp/abi_gpu || echo "BUILD FAILED"
		rm -f /tmp/abi.id /tmp/abi2.id
		echo "--- ops, $N processes"
		timeout 120 "$G/vcclrun" -n $N -- /tmp/abi_gpu ops /tmp/abi.id 2>&1 | tail -40
		echo "--- fault: rank 1 exits"
		VCCL_DEBUG=INFO timeout 60 "$G/vcclrun" -n $N -- /tmp/abi_gpu fault /tmp/abi2.id 2>&1 | grep -v "ready (" | tail -14
		echo "--- two ranks in one process (ncclCommInitAll)"
		timeout 60 /tmp/abi_gpu local 2>&1 | tail -8
		echo "abi done at $((SECONDS - T0)) s"
	} >"$OUT/abi.txt" 2>&1
fi

if [ "$WHAT" = nccltests ] || [ "$WHAT" = all ]; then
	{
		NT=/tmp/nccl-tests-build
		if [ -f "$G/nccl-tests.tgz" ]; then
			mkdir -p $NT && tar -C $NT -xzf "$G/nccl-tests.tgz"
			echo "nccl-tests: the build carried along"
		else
			echo "=== building nccl-tests against gpubin/nccl"
			cp -r "$G/nccl-tests-src" /tmp/nccl-tests-src
			B0=$SECONDS
			BINS=""
			for t in all_reduce all_gather reduce_scatter broadcast reduce sendrecv alltoall; do BINS="$BINS $NT/${t}_perf"; done
			make -C /tmp/nccl-tests-src/src -j16 MPI=1 MPI_HOME="$G/mpi" NCCL_HOME="$G/nccl" CUDA_HOME=$CUDA DSO=1 \
				NVCC_GENCODE="-gencode=arch=compute_90,code=sm_90" BUILDDIR=$NT $BINS 2>&1 | grep -E "error|Error|warning: .*nccl" | head -30
			echo "built in $((SECONDS - B0)) s"
			(cd $NT && tar -czf "$OUT/nccl-tests.tgz" *_perf verifiable/libverifiable.so*)
		fi
		export LD_LIBRARY_PATH="$LIB:$G/mpi/lib:$NT/verifiable:$LD_LIBRARY_PATH"
		ldd $NT/all_reduce_perf | grep -E "nccl|mpi|verifiable"
		ITER="-n 5 -w 1"
		TYPES="float half bfloat16 int32"
		TL=300
		[ "$QUICK" = quick ] && TYPES="float" && TL=60
		for t in all_reduce reduce_scatter reduce all_gather broadcast sendrecv alltoall; do
			for d in $TYPES; do
				echo "--- ${t}_perf -d $d -c 1 -b 8 -e 256M -f 2 $ITER"
				timeout $TL "$G/vcclrun" -n $N -- $NT/${t}_perf -d $d -c 1 -b 8 -e 256M -f 2 $ITER 2>&1 |
					grep -E "^ +[0-9]|wrong|Avg bus|Out of bounds|error|Error|FAIL|Test " | grep -v "#  Rank" | tail -40
			done
		done
		# Timing, and on a shared GPU each all-reduce path (the defaults
		# change when ranks share a GPU: gpu/ce/local.go).
		for v in "" VCCL_GPU_FUSED=1 VCCL_GPU_FLAGS=0; do
			echo "--- $v all_reduce_perf -d float -c 0 -b 8 -e 256M -f 8 -n 20 -w 5 (timing)"
			env $v timeout 120 "$G/vcclrun" -n $N -- $NT/all_reduce_perf -d float -c 0 -b 8 -e 256M -f 8 -n 20 -w 5 2>&1 | grep -E "^ +[0-9]|Avg bus"
			[ "$NGPU" -ge 2 ] && break
		done
		# The C boundary against the Go API on the same engine: the same
		# sweep through vccl-bench (gpubin/vccl-bench, optional), twice,
		# alternating; with two GPUs, NCCL alongside (--vs-nccl).
		if [ -x "$G/vccl-bench" ]; then
			VS=""
			[ "$NGPU" -ge 2 ] && VS=--vs-nccl && export VCCL_NCCL_LIB=${VCCL_NCCL_LIB:-$(find /opt /usr -name 'libnccl.so.2' 2>/dev/null | grep -v gpubin | head -1)}
			for i in 1 2; do
				echo "--- round $i: all_reduce_perf -d float -c 0 -b 1M -e 256M -f 4 -n 50 -w 10"
				timeout 120 "$G/vcclrun" -n $N -- $NT/all_reduce_perf -d float -c 0 -b 1M -e 256M -f 4 -n 50 -w 10 2>&1 | grep -E "^ +[0-9]"
				echo "--- round $i: vccl-bench allreduce --device gpu $VS -c 0 -b 1M -e 256M -f 4 -n 50 -w 10"
				timeout 120 "$G/vcclrun" -n $N -- "$G/vccl-bench" allreduce --device gpu $VS -c 0 -b 1M -e 256M -f 4 -n 50 -w 10 2>&1 | grep -E "^ +[0-9]"
			done
		fi
		if [ "$NGPU" -ge 2 ]; then
			echo "--- all_reduce_perf -g 2 (one process, two GPUs)"
			timeout 300 $NT/all_reduce_perf -g 2 -d float -c 1 -b 16M -e 1G -f 4 -n 20 -w 5 2>&1 | grep -E "^ +[0-9]|Avg bus|wrong"
		fi
		echo "nccl-tests done at $((SECONDS - T0)) s"
	} >"$OUT/nccltests.txt" 2>&1
fi

if [ "$WHAT" = torch ] || [ "$WHAT" = all ]; then
	{
		TR="$PY -m torch.distributed.run --standalone --nproc_per_node=$N"
		S=$ROOT/gpu/torch/nccl_abi_test.py
		rm -rf /tmp/vccl-trace /tmp/ddp-*
		echo "=== PyTorch, NCCL backend, LD_PRELOAD of VCCL's libnccl.so.2, telemetry on"
		TOP=""
		[ -x "$G/vccl-top" ] && TOP=$G/vccl-top
		LD_PRELOAD=$LIB/libnccl.so.2 VCCL_TELEMETRY=1 VCCL_TELEMETRY_DIR=/tmp/vccl-trace VCCL_TOP=$TOP \
			timeout 300 $TR $S --phase ops 2>&1 | grep -v "^\s*$" | tail -60
		if [ -x "$G/vccl-analyze" ]; then
			echo "--- vccl-analyze of the job's traces"
			timeout 120 "$G/vccl-analyze" /tmp/vccl-trace 2>&1 | head -30
		fi
		echo "=== DistributedDataParallel on VCCL"
		LD_PRELOAD=$LIB/libnccl.so.2 timeout 200 $TR $S --phase ddp --out /tmp/ddp-vccl 2>&1 | grep "\[" | tail -4
		REF=gloo
		[ "$NGPU" -ge 2 ] && REF=nccl
		echo "=== the same on torch's own backend ($REF)"
		timeout 200 $TR $S --phase ddp --backend $REF --out /tmp/ddp-ref 2>&1 | grep "\[" | tail -4
		$PY - <<'PYEOF'
import json, glob
v = [json.load(open(f)) for f in sorted(glob.glob("/tmp/ddp-vccl.rank*.json"))]
r = [json.load(open(f)) for f in sorted(glob.glob("/tmp/ddp-ref.rank*.json"))]
ok = len(v) == len(r) > 0 and all(a["losses"] == b["losses"] and a["params_sha256"] == b["params_sha256"] for a, b in zip(v, r))
print("DDP losses and parameters equal to the reference run:", ok)
for a, b in zip(v, r):
    print(" rank", a["rank"], "vccl (nccl %s)" % a["nccl"], [float.fromhex(x) for x in a["losses"]])
    print(" rank", b["rank"], "%s (nccl %s)" % (b["backend"], b["nccl"]), [float.fromhex(x) for x in b["losses"]])
PYEOF
		echo "torch done at $((SECONDS - T0)) s"
	} >"$OUT/torch.txt" 2>&1
fi
echo "all done at $((SECONDS - T0)) s" >>"$OUT/info.txt"
cat "$OUT/info.txt" "$OUT"/abi.txt "$OUT"/torch.txt 2>/dev/null | tail -150
grep -E "wrong|Avg bus|FAIL|error" "$OUT/nccltests.txt" 2>/dev/null | head -80
