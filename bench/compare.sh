#!/usr/bin/env bash
# Runs VCCL-Go's vccl-bench and its peers back to back on the same sizes and
# writes the comparison into BENCHMARKS.md (the section between the
# "bench/compare.sh" markers, replaced on every run): the tables against
# Open MPI and Gloo and telemetry's cost, with the date, machine and command.
#
#   bench/compare.sh                 # the full comparison (about 30 minutes on 2 cores; REPEAT=3 took 17)
#   bench/compare.sh --markdown      # the same, the section printed on stdout, no file edited
#   bench/compare.sh --from DIR      # no runs: the section again from an earlier run's raw outputs
#   QUICK=1 OUT=/tmp/b.md bench/compare.sh   # a smoke run of the script itself
#
# Peers: Open MPI (Debian openmpi-bin, libopenmpi-dev; shared memory through
# the vader BTL, TCP over loopback through the tcp BTL, pml ob1 both; run
# plainly and with glibc keeping freed memory, MPI_KEEP below, VCCL's ratios
# against the better of the two at each size) and
# Gloo (Debian python3-torch, run with /usr/bin/python3; TCP over loopback).
# Both are installed with apt-get when missing.
#
# Environment:
#   RANKS="2 4"    world sizes (4 on this 2-core machine is oversubscribed)
#   REPEAT=5       runs of every measurement, interleaved; the table shows
#                  the median busbw per size
#   OUT=BENCHMARKS.md   the file whose section is replaced
#   RAW=bench/out/DATE  where the raw outputs go (kept; bench/out is ignored)
#   QUICK=1        small sizes and few iterations: checks the script, not the library
#   BIND=core      core: both launchers bind ranks to cores when they fit
#                  (their defaults); none: neither does (--bind-to none)
#   MPI_EXTRA=""   more mpirun arguments
#   MPI_KEEP="-x MALLOC_MMAP_MAX_=0 -x MALLOC_TRIM_THRESHOLD_=17179869184"
#                  mpirun arguments of Open MPI's second run (glibc keeps
#                  freed memory: on a VM where a fresh page costs 12-16 us,
#                  Open MPI's per-call temporary makes the plain run
#                  fault-bound at >=16 MiB)
#   BUILD_REF=HEAD build VCCL from this commit (git archive) instead of the working tree
set -euo pipefail
cd "$(dirname "$0")/.."

MARKDOWN=0
FROM=
while (($#)); do
	case $1 in
	--markdown) MARKDOWN=1 ;;
	--from)
		FROM=${2:?--from wants the raw directory of an earlier run}
		shift
		;;
	*) echo "compare.sh: unknown argument $1 (want --markdown or --from DIR)" >&2; exit 2 ;;
	esac
	shift
done
export PATH="/usr/local/go/bin:$HOME/go/bin:$PATH"

RANKS=${RANKS:-"2 4"}
REPEAT=${REPEAT:-5}
OUT=${OUT:-BENCHMARKS.md}
STAMP=$(date -u +%Y%m%dT%H%M%SZ)
RAW=${RAW:-bench/out/$STAMP}
QUICK=${QUICK:-0}
BIND=${BIND:-core}
case $BIND in
core) MPI_BIND="" ;; # Open MPI's default: cores for np <= 2, none when oversubscribed
none) MPI_BIND="--bind-to none" ;;
*) echo "BIND=$BIND: want core or none" >&2; exit 2 ;;
esac
MPI_EXTRA="$MPI_BIND ${MPI_EXTRA:-}"
MPI_KEEP=${MPI_KEEP:-"-x MALLOC_MMAP_MAX_=0 -x MALLOC_TRIM_THRESHOLD_=17179869184"}
RUN_TIMEOUT=${RUN_TIMEOUT:-900}
BUILD_REF=${BUILD_REF:-}

log() { printf '== %s\n' "$*" >&2; }
((MARKDOWN)) && OUT=-

if [ -n "$FROM" ]; then
	[ -d "$FROM" ] || { echo "compare.sh: --from $FROM: no such directory" >&2; exit 2; }
	# The run's machine, load and timing are not in its raw outputs: the
	# section says so rather than guess.
	/usr/bin/python3 bench/report.py --raw "$FROM" --out "$OUT" --ranks "$RANKS" --repeat "$REPEAT" \
		--command "bench/compare.sh (reported again with --from $FROM)" --bind "$BIND" \
		--date "$(date -u -r "$FROM" '+%Y-%m-%d %H:%M UTC')"
	exit
fi

# --- peers -------------------------------------------------------------------
need=()
command -v gcc >/dev/null || need+=(gcc)
{ command -v mpicc && command -v mpirun; } >/dev/null || need+=(openmpi-bin libopenmpi-dev)
/usr/bin/python3 -c 'import torch.distributed' 2>/dev/null || need+=(python3-torch)
if ((${#need[@]})); then
	SUDO=
	[ "$(id -u)" = 0 ] || SUDO=sudo
	log "installing ${need[*]} (takes minutes)"
	$SUDO apt-get update -q
	DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q "${need[@]}"
fi

# --- builds ------------------------------------------------------------------
BIN=$(realpath -m "$RAW/bin")
mkdir -p "$BIN"
if [ -n "$BUILD_REF" ]; then
	# Measure a commit, not the working tree (where others' work in
	# progress may be): build from a clean export of it.
	src=$(realpath -m "$RAW/src")
	mkdir -p "$src"
	git archive "$BUILD_REF" | tar -x -C "$src"
	VERSION="$(git rev-parse --short "$BUILD_REF")"
	log "building vcclrun and vccl-bench from $BUILD_REF ($VERSION) into $BIN"
	(cd "$src" && go build -o "$BIN/" ./cmd/vcclrun ./cmd/vccl-bench)
	# A second copy of the sources inside the checkout would be walked by
	# the tests that read every file (internal/layering).
	rm -rf "$src"
else
	VERSION="$(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
	git diff --quiet HEAD -- collective transport flowtel 2>/dev/null || VERSION="$VERSION + uncommitted changes in collective, transport or flowtel"
	log "building vcclrun and vccl-bench from the working tree into $BIN"
	go build -o "$BIN/" ./cmd/vcclrun ./cmd/vccl-bench
fi
gcc -O2 -Wall -pthread -o "$BIN/cacheline" bench/cacheline.c
log "building the MPI benchmarks"
for c in allreduce allgather reducescatter bcast; do
	mpicc -O2 -Wall -o "$BIN/mpi-$c" "bench/mpi/$c.c" -lm
done

# --- sizes -------------------------------------------------------------------
# All-reduce from 1 KiB to 64 MiB by 4; the small sizes with more iterations
# (their times are microseconds). The other collectives from 64 KiB.
if [ "$QUICK" = 1 ]; then
	AR_SWEEPS=("-b 1K -e 16K -f 4 -n 20 -w 2" "-b 1M -e 1M -f 4 -n 3 -w 1")
	ALT_SWEEPS=("${AR_SWEEPS[@]}")
	BIG_SWEEPS=("-b 64K -e 64K -f 4 -n 20 -w 2" "-b 1M -e 1M -f 4 -n 3 -w 1")
else
	# Iterations sized so each timed loop lasts milliseconds, not
	# microseconds: one descheduling on 2 cores then moves a mean by a few
	# percent, not by 2x (the 2026-11-30 01:10 run, 20 iterations of 1 MiB,
	# gave 2.1 to 9.1 GB/s for one setting).
	AR_SWEEPS=("-b 1K -e 256K -f 4 -n 2000 -w 200" "-b 1M -e 4M -f 4 -n 200 -w 20" "-b 16M -e 64M -f 4 -n 20 -w 3")
	# The other collectives from 64 KiB (issue 34's targets start there),
	# with all-reduce's counts from 1 MiB: 50 iterations of 1 MiB (the
	# 01:39 run) were a 3-5 ms loop, and its three runs of one all-gather
	# gave 86, 155 and 194 us. 64 and 256 KiB take 1000 iterations, a loop
	# of 20-200 ms over shared memory or TCP (2000, all-reduce's, would
	# add minutes where 4 ranks share 2 cores).
	BIG_SWEEPS=("-b 64K -e 256K -f 4 -n 1000 -w 100" "${AR_SWEEPS[@]:1}")
	# Telemetry on/off: ten times the calls below 1 MiB, five above, so each
	# of the ten alternating blocks lasts milliseconds too (200 calls of
	# 1 KiB were a 0.25 ms block, which one wake-up of another thread on
	# these 2 cores moves by 5%, the size of the target).
	ALT_SWEEPS=("-b 1K -e 256K -f 4 -n 20000 -w 200" "-b 1M -e 4M -f 4 -n 1000 -w 20" "-b 16M -e 64M -f 4 -n 100 -w 3")
fi

# run NAME CMD...: one measurement, its output in $RAW/NAME.REP.txt. A failed
# run is recorded and the script goes on.
run() {
	local name=$1
	shift
	local f="$RAW/$name.$rep.txt"
	local rc=0
	log "$name (run $rep): $*"
	timeout "$RUN_TIMEOUT" bash -c '"$@"' run "$@" >"$f" 2>"$f.err" || rc=$?
	if ((rc)); then
		echo "# FAILED: exit $rc" >>"$f"
		log "$name failed (exit $rc); see $f.err"
	fi
}

mpi() { # mpi N TRANSPORT PROG ARGS...
	local n=$1 tr=$2 prog=$3
	shift 3
	local btl=(--mca btl self,vader)
	[ "$tr" = tcp ] && btl=(--mca btl self,tcp --mca btl_tcp_if_include lo)
	# shellcheck disable=SC2086
	mpirun --allow-run-as-root --oversubscribe -np "$n" --mca pml ob1 "${btl[@]}" $MPI_EXTRA "$BIN/mpi-$prog" "$@"
}

mpikeep() { # mpikeep N TRANSPORT PROG ARGS...: mpi with glibc keeping freed memory
	MPI_EXTRA="$MPI_EXTRA $MPI_KEEP" mpi "$@"
}

vccl() { # vccl N TRANSPORT TELEMETRY COLLECTIVE ARGS...
	local n=$1 tr=$2 tel=$3
	shift 3
	VCCL_TRANSPORT=$tr "$BIN/vcclrun" -n "$n" --bind-to "$BIND" --tag-output=false -- "$BIN/vccl-bench" "$@" -c 1 --telemetry "$tel" --progress off
}

gloo() { # gloo N ARGS...
	local n=$1
	shift
	GLOO_SOCKET_IFNAME=lo "$BIN/vcclrun" -n "$n" --bind-to "$BIND" --tag-output=false -- /usr/bin/python3 bench/gloo/bench.py "$@" -c 1
}

export -f mpi mpikeep vccl gloo
export BIN MPI_EXTRA MPI_KEEP BIND

# cacheline: the CPU-to-CPU hand-off in ns (bench/cacheline.c says why),
# at real-time priority where allowed so that other work does not stretch it.
cacheline() { chrt -r 10 "$BIN/cacheline" 2>/dev/null || "$BIN/cacheline"; }
START_LOAD=$(cut -d' ' -f1-3 /proc/loadavg)
T0=$(date +%s)
HANDOFF=()
for rep in $(seq 1 "$REPEAT"); do
	HANDOFF+=("$(cacheline)")
	log "run $rep: CPU 0 <-> 1 cache-line hand-off ${HANDOFF[-1]} ns"
	for n in $RANKS; do
		for i in "${!AR_SWEEPS[@]}"; do
			# shellcheck disable=SC2086
			set -- ${AR_SWEEPS[$i]}
			run "allreduce.n$n.gloo.s$i" gloo "$n" allreduce "$@"
			for tr in shm tcp; do
				run "allreduce.n$n.mpi-$tr.s$i" mpi "$n" "$tr" allreduce "$@"
				run "allreduce.n$n.mpi-$tr-keep.s$i" mpikeep "$n" "$tr" allreduce "$@"
				run "allreduce.n$n.vccl-$tr-off.s$i" vccl "$n" "$tr" off allreduce "$@"
				# Telemetry off and on alternately within one launch: separate
				# launches each drew their own slow spells.
				# More ranks than cores: no target, all-reduce's own counts
				# (the longer blocks would take minutes there).
				alt=${ALT_SWEEPS[$i]}
				((n > $(nproc))) && alt=${AR_SWEEPS[$i]}
				# shellcheck disable=SC2086
				run "allreduce.n$n.vccl-$tr-alt.s$i" vccl "$n" "$tr" alternate allreduce $alt
				# The same with the exporters writing in the "on" blocks (an
				# Arrow trace, /metrics scraped): over shared memory, where
				# ranks fit (the target's setting). The trace is not kept.
				# And with what --telemetry on attaches by default (the live
				# endpoint, folding every record): telemetry as a job turns
				# it on.
				if [ "$tr" = shm ] && ((n <= $(nproc))); then
					# shellcheck disable=SC2086
					run "allreduce.n$n.vccl-$tr-altx.s$i" vccl "$n" "$tr" alternate allreduce $alt --exporters "$RAW/trace"
					rm -rf "$RAW/trace"
					# shellcheck disable=SC2086
					run "allreduce.n$n.vccl-$tr-altd.s$i" vccl "$n" "$tr" alternate allreduce $alt --attach
				fi
			done
		done
		for c in allgather reducescatter broadcast; do
			prog=$c
			[ "$c" = broadcast ] && prog=bcast
			for i in "${!BIG_SWEEPS[@]}"; do
				# shellcheck disable=SC2086
				set -- ${BIG_SWEEPS[$i]}
				for tr in shm tcp; do
					run "$c.n$n.mpi-$tr.s$i" mpi "$n" "$tr" "$prog" "$@"
					run "$c.n$n.mpi-$tr-keep.s$i" mpikeep "$n" "$tr" "$prog" "$@"
					run "$c.n$n.vccl-$tr-off.s$i" vccl "$n" "$tr" off "$c" "$@"
				done
			done
		done
	done
done
HANDOFF+=("$(cacheline)")
ELAPSED=$(($(date +%s) - T0))
END_LOAD=$(cut -d' ' -f1-3 /proc/loadavg)

# --- report ------------------------------------------------------------------
cmdline="bench/compare.sh"
[ "$RANKS" != "2 4" ] && cmdline="RANKS=\"$RANKS\" $cmdline"
[ "$REPEAT" != 5 ] && cmdline="REPEAT=$REPEAT $cmdline"
[ "$BIND" != core ] && cmdline="BIND=$BIND $cmdline"
[ "$QUICK" = 1 ] && cmdline="QUICK=1 $cmdline"
[ -n "$BUILD_REF" ] && cmdline="BUILD_REF=$BUILD_REF $cmdline"
/usr/bin/python3 bench/report.py --raw "$RAW" --out "$OUT" --ranks "$RANKS" \
	--command "$cmdline" --start-load "$START_LOAD" --end-load "$END_LOAD" --elapsed "$ELAPSED" \
	--mpi-version "$(mpirun --version 2>/dev/null | head -1)" \
	--torch-version "$(/usr/bin/python3 -c 'import torch; print(torch.__version__)' 2>/dev/null)" \
	--go-version "$(go version)" --repeat "$REPEAT" --mpi-args "--mca pml ob1 $MPI_EXTRA" --mpi-keep "$MPI_KEEP" \
	--commit "$VERSION" --handoff "${HANDOFF[*]}" --bind "$BIND"
if ((MARKDOWN)); then
	log "printed the comparison (raw outputs in $RAW; bench/compare.sh --from $RAW prints it again)"
else
	log "wrote the comparison into $OUT (raw outputs in $RAW)"
fi
