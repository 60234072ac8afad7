#!/usr/bin/env bash
# Regenerates testdata/trace: a 4-rank job (topjob under vcclrun) with
# telemetry, whose rank 3 is killed (SIGKILL) about 2 s in; the survivors'
# collectives fail and they exit. Run from the repository root:
#   bash cmd/vccl-top/testdata/gen-trace.sh
set -euo pipefail
out=cmd/vccl-top/testdata/trace
bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
go build -o "$bin/" ./cmd/vcclrun ./cmd/vccl-top/internal/topjob
rm -rf "$out" && mkdir -p "$out"
VCCL_TELEMETRY_DIR="$out" VCCL_TELEMETRY_ADDR=off "$bin/vcclrun" -n 4 --grace 10s -- \
	"$bin/topjob" -pause 15ms -count 65536 -duration 10s >"$bin/log" 2>&1 &
job=$!
pid=
for _ in $(seq 300); do
	pid=$(sed -n 's/^\[3\] rank 3 of 4: pid \([0-9]*\).*/\1/p' "$bin/log")
	[ -n "$pid" ] && break
	sleep 0.1
done
[ -n "$pid" ] || { cat "$bin/log"; exit 1; }
sleep 2.5
kill -9 "$pid"
wait "$job" || true
rm -f "$out"/endpoints.json*
ls -l "$out"
