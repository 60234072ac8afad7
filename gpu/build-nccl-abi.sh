#!/bin/bash
# Builds gpubin/ for gpu/run-nccl-abi.sh from the committed tree (HEAD), so
# that what runs on the GPU machine is what a commit holds, whatever else
# the working tree has: libnccl.so.2 and nccl.h, the MPI stand-in,
# vcclrun, vccl-analyze and vccl-top (or, with BENCH=1, vccl-bench for the
# comparison with the Go API instead: the carried tree holds 64 MiB), and
# nccl-tests' sources (from ../shared/third_party/nccl-tests, or
# NCCL_TESTS_SRC). A build of nccl-tests that came back from a run
# (nccl-tests.tgz) may be put in gpubin/ to skip building it there.
set -e
ROOT=$(cd "$(dirname "$0")/.." && pwd)
G=$ROOT/gpubin
SRC=$(mktemp -d)
trap 'rm -rf "$SRC"' EXIT
git -C "$ROOT" archive HEAD | tar -x -C "$SRC"
mkdir -p "$G/nccl/include" "$G/nccl/lib" "$G/mpi/include" "$G/mpi/lib"
cd "$SRC"
go build -trimpath -ldflags='-s -w -extldflags=-Wl,-soname,libnccl.so.2' -buildmode=c-shared -o "$G/nccl/lib/libnccl.so.2" ./cmd/libnccl
rm -f "$G/nccl/lib/libnccl.so.h" "$G/nccl/lib/libnccl.so"
cp cmd/libnccl/include/nccl.h "$G/nccl/include/"
gcc -std=c11 -O2 -Wall -shared -fPIC -o "$G/mpi/lib/libmpi.so" gpu/nccltests/mpishim/mpi.c
cp gpu/nccltests/mpishim/mpi.h "$G/mpi/include/"
if [ "$BENCH" = 1 ]; then
	rm -f "$G/vccl-analyze" "$G/vccl-top"
	CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o "$G/" ./cmd/vcclrun ./cmd/vccl-bench
else
	rm -f "$G/vccl-bench"
	CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o "$G/" ./cmd/vcclrun ./cmd/vccl-analyze ./cmd/vccl-top
fi
NT=${NCCL_TESTS_SRC:-$ROOT/../shared/third_party/nccl-tests}
rm -rf "$G/nccl-tests-src" && cp -r "$NT" "$G/nccl-tests-src"
echo "gpubin/ built from $(git -C "$ROOT" rev-parse --short HEAD): $(du -sh "$G" | cut -f1)"
