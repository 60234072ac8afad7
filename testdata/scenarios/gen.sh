#!/usr/bin/env bash
# Regenerates the analyzer's labelled corpus: real VCCL jobs with flow
# telemetry on, each with one fault injected for real on this machine, their
# Arrow traces committed under testdata/scenarios/<name>/ with label.json
# (what was injected, what the analyzer must name). Then
# `go test ./analyzer -run TestCorpus -update` rewrites the golden findings.
#
#   testdata/scenarios/gen.sh [SCENARIO...]     # default: the committed ones
#
# VCCL_SCENARIOS_OUT=DIR writes the scenarios there instead (then
# VCCL_CORPUS_DIR=DIR go test ./analyzer -run TestCorpus checks a fresh run
# against the labels, without the golden files). VCCL_CORPUS_RUNS=N runs
# each scenario N times, into NAME-1 … NAME-N, each run with its own seed:
# the sizes, the faulty rank and the fault's strength vary with it
# (VCCL_CORPUS_SEED offsets the seeds). test/diagnosis runs it that way on
# fresh runs and scores the analyzer (docs/analyzer.md).
#
# Needs root, iproute2 (ip netns, tc tbf), nftables and toxiproxy's server
# (go install github.com/Shopify/toxiproxy/v2/cmd/server@v2.5.0; nft comes
# from Debian's nftables). Every rank runs in its own network namespace
# joined by a bridge in a switch namespace, over VCCL_TRANSPORT=tcp; nothing
# is added to the root namespace, and everything made is torn down on exit.
#
# Scenarios:
#   clean-4r        4 ranks, 1 MiB all-reduces, no fault
#   clean-2ch       4 ranks, 2 channels, 4 MiB all-reduces, no fault
#   tbf-mid-4r      rank 2's interface limited to 200 Mbit/s (tc tbf) from
#                   call 15 to call 30 of 40: link 2->3 of the ring
#   tbf-start-4r    rank 1's interface limited to 300 Mbit/s for the whole
#                   run: link 1->2
#   latency-4r      toxiproxy latency toxic (5 ms each way) on the
#                   connection between ranks 1 and 2: link 1->2
#   straggler-4r    rank 3 sleeps 25 ms before every third call
#   hol-2r          rank 0 posts a 16 MiB send and then 4 small sends to
#                   rank 1 on one ordered connection, 20 times
#
# Seeded scenarios (for VCCL_CORPUS_RUNS; run k has seed k):
#   clean-hog       4 ranks with two busy loops hogging both cores, no fault
#   clean-osub      6 ranks on 2 cores, no fault
#   freeze-once     one rank's process stopped (SIGSTOP) for 1-2 s mid-call
#   freeze-periodic one rank stopped for 300 ms every 10 calls
#   kill            one rank killed (SIGKILL) mid-run
#   tbf             one rank's egress limited (tc tbf) mid-run: its ring link
#   htb-pair        one rank's traffic to its ring successor alone limited
#                   (htb with a u32 filter on the destination address)
#   ingress         one rank's ingress limited mid-run (tbf on its port of
#                   the switch): the ring link into it
#   two-faults      a rate-limited link and a rank frozen elsewhere, at once
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$(pwd)
out=${VCCL_SCENARIOS_OUT:-$root/testdata/scenarios}
runs=${VCCL_CORPUS_RUNS:-1}
run=1
seed=0
export PATH="$PATH:$HOME/go/bin:/usr/local/go/bin"

NS=vsc # namespace prefix
NET=10.213.0
work=$(mktemp -d /tmp/vccl-scenarios.XXXXXX)
pids=()

cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
	pids=()
	for n in $(ip netns list | awk '{print $1}' | grep "^$NS-" || true); do
		ip netns pids "$n" 2>/dev/null | xargs -r kill 2>/dev/null || true
		ip netns del "$n" 2>/dev/null || true
	done
}
trap 'cleanup; rm -rf "$work"' EXIT

need() { command -v "$1" >/dev/null || { echo "gen.sh: $1 not found: $2" >&2; exit 1; }; }
need ip "apt-get install iproute2"
need tc "apt-get install iproute2"
toxiproxy=$(command -v toxiproxy-server || echo "$HOME/go/bin/server")

go build -o "$work/" ./analyzer/internal/scenario
bin=$work/scenario

# netup N: ranks 0..N-1 in namespaces $NS-rK with address $NET.(10+K) on
# interface vK, bridged in $NS-sw; a proxy namespace $NS-px at $NET.100.
netup() {
	local n=$1
	ip netns add $NS-sw
	ip -n $NS-sw link add br0 type bridge
	ip -n $NS-sw link set br0 up
	ip -n $NS-sw link set lo up
	for k in $(seq 0 $((n - 1))) px; do
		local ns=$NS-px ifc=vpx addr=$NET.100
		if [ "$k" != px ]; then ns=$NS-r$k ifc=v$k addr=$NET.$((10 + k)); fi
		ip netns add "$ns"
		ip link add "$ifc" netns "$ns" type veth peer name "s$k" netns $NS-sw
		ip -n $NS-sw link set "s$k" master br0 up
		ip -n "$ns" addr add "$addr/24" dev "$ifc"
		ip -n "$ns" link set "$ifc" up
		ip -n "$ns" link set lo up
	done
}

# rank K DIR ARGS...: start rank K of the job in its namespace.
rank() {
	local k=$1 dir=$2
	shift 2
	ip netns exec $NS-r$k env -i PATH="$PATH" HOME="$HOME" \
		RANK="$k" WORLD_SIZE="$world" LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 \
		MASTER_ADDR=$NET.10 MASTER_PORT=29511 VCCL_JOB_TOKEN="corpus-$name" \
		VCCL_TRANSPORT=tcp VCCL_SOCKET_IFNAME=v$k VCCL_NCHANNELS="${channels:-1}" \
		VCCL_TELEMETRY=1 VCCL_TIMEOUT=60s \
		"$bin" -dir "$dir" "$@" >"$work/$name-rank$k.log" 2>&1 &
	pids+=($!)
}

# waitany: wait for every rank; a rank may fail (the scenario kills one, or
# its peers fail for it).
waitany() {
	for p in "${pids[@]}"; do wait "$p" || true; done
	pids=()
}

# pick N: a number in [0, N) from the run's seed.
pick() { echo $(((seed * 7919 + 13) % $1)); }

# size: the all-reduce size of the run: 1, 2 or 4 MiB.
size() { echo $(((1 << 20) << $(pick 3))); }

# hogs N: N busy loops until the scenario ends.
hogs() {
	for _ in $(seq "$1"); do
		sh -c 'while :; do :; done' &
		pids+=($!)
	done
}

# waitall: wait for every rank, failing if one failed.
waitall() {
	local rc=0
	for p in "${pids[@]}"; do wait "$p" || rc=$?; done
	pids=()
	if [ $rc -ne 0 ]; then
		echo "gen.sh: $name: a rank failed" >&2
		tail -n 5 "$work/$name"-rank*.log >&2
		exit 1
	fi
}

# begin NAME: a fresh directory for the scenario's traces.
begin() {
	name=$1
	if [ "$runs" -gt 1 ]; then name=$1-$run; fi
	dir=$out/$name
	rm -rf "$dir"
	mkdir -p "$dir"
	cleanup
	echo "== $name"
}

label() { cat >"$dir/label.json"; }

scenario_clean-4r() {
	begin clean-4r
	world=4
	netup $world
	for k in 0 1 2 3; do rank $k "$dir" -iters 40 -bytes $((1 << 20)); done
	waitall
	label <<-EOF
	{"injected": "nothing: 4 ranks, 40 all-reduces of 1 MiB over TCP between network namespaces", "expect": []}
	EOF
}

scenario_clean-2ch() {
	begin clean-2ch
	world=4 channels=2
	netup $world
	for k in 0 1 2 3; do rank $k "$dir" -iters 30 -bytes $((4 << 20)); done
	waitall
	channels=1
	label <<-EOF
	{"injected": "nothing: 4 ranks, 2 channels, 30 all-reduces of 4 MiB over TCP between network namespaces", "expect": []}
	EOF
}

scenario_tbf-mid-4r() {
	begin tbf-mid-4r
	world=4
	netup $world
	local add="tc qdisc add dev v2 root tbf rate 200mbit burst 64kb latency 100ms"
	local del="tc qdisc del dev v2 root"
	for k in 0 1 2 3; do
		rank $k "$dir" -iters 40 -bytes $((1 << 20)) -inject-rank 2 -inject-iter 15 -inject-cmd "$add" -heal-iter 30 -heal-cmd "$del"
	done
	waitall
	label <<-EOF
	{"injected": "tc tbf 200 Mbit/s on rank 2's interface (egress) from all-reduce 15 to all-reduce 30 of 40 (1 MiB, 4-rank ring): link 2->3 throttled mid-run",
	 "expect": [{"kind": "backpressure", "rank": 2, "peer": 3}, {"kind": "slow_link", "rank": 2, "peer": 3}]}
	EOF
}

scenario_tbf-start-4r() {
	begin tbf-start-4r
	world=4
	netup $world
	ip netns exec $NS-r1 tc qdisc add dev v1 root tbf rate 300mbit burst 64kb latency 100ms
	for k in 0 1 2 3; do rank $k "$dir" -iters 25 -bytes $((1 << 20)); done
	waitall
	label <<-EOF
	{"injected": "tc tbf 300 Mbit/s on rank 1's interface (egress) for the whole run (25 all-reduces of 1 MiB, 4-rank ring): link 1->2 slow from the start",
	 "expect": [{"kind": "slow_link", "rank": 1, "peer": 2}]}
	EOF
}

scenario_latency-4r() {
	need nft "apt-get install nftables"
	need curl "apt-get install curl"
	[ -x "$toxiproxy" ] || { echo "gen.sh: toxiproxy server not found: go install github.com/Shopify/toxiproxy/v2/cmd/server@v2.5.0" >&2; exit 1; }
	begin latency-4r
	world=4
	netup $world
	ip netns exec $NS-px "$toxiproxy" -host $NET.100 -port 8474 >"$work/toxiproxy.log" 2>&1 &
	pids+=($!)
	# Ranks 0, 2 and 3 first: rank 2 listens, then waits for rank 1.
	for k in 0 2 3; do rank $k "$dir" -iters 30 -bytes $((1 << 20)); done
	local port="" t
	for t in $(seq 100); do
		port=$(ip netns exec $NS-r2 ss -ltnH "src $NET.12" | awk '{split($4, a, ":"); print a[2]}' | head -n 1)
		[ -n "$port" ] && break
		sleep 0.1
	done
	[ -n "$port" ] || { echo "gen.sh: rank 2 never listened" >&2; exit 1; }
	api() { ip netns exec $NS-px curl -fsS -X POST "http://$NET.100:8474$1" -d "$2" >/dev/null; }
	for t in $(seq 50); do api /proxies '{"name":"r1r2","listen":"'$NET'.100:20000","upstream":"'$NET'.12:'$port'"}' 2>/dev/null && break; sleep 0.1; done
	api /proxies/r1r2/toxics '{"name":"up","type":"latency","stream":"upstream","attributes":{"latency":5,"jitter":0}}'
	api /proxies/r1r2/toxics '{"name":"down","type":"latency","stream":"downstream","attributes":{"latency":5,"jitter":0}}'
	# Rank 1's connection to rank 2 goes through the proxy.
	ip netns exec $NS-r1 nft -f - <<-EOF
	table ip vsc {
		chain out {
			type nat hook output priority -100;
			ip daddr $NET.12 tcp dport $port dnat to $NET.100:20000
		}
	}
	EOF
	rank 1 "$dir" -iters 30 -bytes $((1 << 20))
	local ranks=("${pids[@]:1}")
	local rc=0
	for p in "${ranks[@]}"; do wait "$p" || rc=$?; done
	[ $rc -eq 0 ] || { echo "gen.sh: latency-4r: a rank failed" >&2; tail -n 5 "$work/$name"-rank*.log >&2; exit 1; }
	label <<-EOF
	{"injected": "toxiproxy latency toxic, 5 ms upstream and 5 ms downstream, on the connection between ranks 1 and 2 (rank 1 dials rank 2 through the proxy, nft DNAT in rank 1's namespace); 30 all-reduces of 1 MiB, 4-rank ring: link 1->2",
	 "expect": [{"kind": "slow_link", "rank": 1, "peer": 2}]}
	EOF
}

scenario_straggler-4r() {
	begin straggler-4r
	world=4
	netup $world
	for k in 0 1 2 3; do rank $k "$dir" -iters 30 -bytes $((1 << 20)) -straggler 3 -straggle 25ms -straggle-every 3; done
	waitall
	label <<-EOF
	{"injected": "rank 3 sleeps 25 ms before every third of 30 all-reduces (1 MiB, 4 ranks)",
	 "expect": [{"kind": "straggler", "rank": 3, "peer": -1}]}
	EOF
}

scenario_hol-2r() {
	begin hol-2r
	world=2
	netup $world
	for k in 0 1; do rank $k "$dir" -workload hol -iters 20 -bytes $((16 << 20)) -small 4096 -small-count 4; done
	waitall
	label <<-EOF
	{"injected": "rank 0 starts a 16 MiB send and then 4 sends of 4 KiB to rank 1 as separate asynchronous calls, 20 times: one ordered connection completes the small ones behind the large one",
	 "expect": [{"kind": "hol_blocking", "rank": 0, "peer": 1}]}
	EOF
}

scenario_clean-hog() {
	begin clean-hog
	world=4
	netup $world
	local bytes
	bytes=$(size)
	hogs 2
	local hp=("${pids[@]}")
	pids=()
	for k in 0 1 2 3; do rank $k "$dir" -iters 40 -bytes "$bytes"; done
	waitall
	kill "${hp[@]}" 2>/dev/null || true
	label <<-EOF
	{"injected": "nothing: 4 ranks, 40 all-reduces of $bytes B, two busy loops hogging both cores", "expect": []}
	EOF
}

scenario_clean-osub() {
	begin clean-osub
	world=6
	netup $world
	local bytes
	bytes=$(size)
	for k in 0 1 2 3 4 5; do rank $k "$dir" -iters 30 -bytes "$bytes"; done
	waitall
	label <<-EOF
	{"injected": "nothing: 6 ranks on 2 cores, 30 all-reduces of $bytes B", "expect": []}
	EOF
}

scenario_freeze-once() {
	begin freeze-once
	world=4
	netup $world
	local r bytes d
	r=$(pick 4)
	bytes=$(size)
	d=$((1 + seed % 2))s
	for k in 0 1 2 3; do rank $k "$dir" -iters 40 -bytes "$bytes" -freeze-rank "$r" -freeze-iter 15 -freeze-for "$d"; done
	waitall
	label <<-EOF
	{"injected": "rank $r's process stopped (SIGSTOP) for $d, 1 ms into all-reduce 15 of 40 ($bytes B)",
	 "expect": [{"kinds": ["stall", "straggler"], "rank": $r, "peer": -1}]}
	EOF
}

scenario_freeze-periodic() {
	begin freeze-periodic
	world=4
	netup $world
	local r bytes
	r=$(pick 4)
	bytes=$(size)
	for k in 0 1 2 3; do rank $k "$dir" -iters 50 -bytes "$bytes" -freeze-rank "$r" -freeze-iter 5 -freeze-every 10 -freeze-for 300ms; done
	waitall
	label <<-EOF
	{"injected": "rank $r's process stopped for 300 ms in every tenth of 50 all-reduces ($bytes B), from the fifth",
	 "expect": [{"kinds": ["stall", "straggler"], "rank": $r, "peer": -1}]}
	EOF
}

scenario_kill() {
	begin kill
	world=4
	netup $world
	local r bytes
	r=$((1 + $(pick 3))) # rank 0 hosts the rendezvous store
	bytes=$(size)
	for k in 0 1 2 3; do rank $k "$dir" -iters 100 -gap 5ms -bytes "$bytes" -kill-rank "$r" -kill-iter 50; done
	waitany
	label <<-EOF
	{"injected": "rank $r killed (SIGKILL) 1 ms into all-reduce 50 of 100 ($bytes B)",
	 "expect": [{"kind": "dead_rank", "rank": $r, "peer": -1}]}
	EOF
}

scenario_tbf() {
	begin tbf
	world=4
	netup $world
	local r bytes rate next
	r=$(pick 4)
	bytes=$(size)
	rate=$((150 + 50 * (seed % 3)))mbit
	next=$(((r + 1) % world))
	local add="tc qdisc add dev v$r root tbf rate $rate burst 64kb latency 100ms"
	local del="tc qdisc del dev v$r root"
	for k in 0 1 2 3; do
		rank $k "$dir" -iters 40 -bytes "$bytes" -inject-rank "$r" -inject-iter 15 -inject-cmd "$add" -heal-iter 30 -heal-cmd "$del"
	done
	waitall
	label <<-EOF
	{"injected": "tc tbf $rate on rank $r's interface (egress) from all-reduce 15 to 30 of 40 ($bytes B, 4-rank ring): link $r->$next",
	 "expect": [{"kinds": ["backpressure", "slow_link"], "rank": $r, "peer": $next}]}
	EOF
}

scenario_htb-pair() {
	begin htb-pair
	world=4
	netup $world
	local r bytes next
	r=$(pick 4)
	bytes=$(size)
	next=$(((r + 1) % world))
	# Only what rank r sends to its ring successor is limited.
	ip netns exec $NS-r$r tc qdisc add dev v$r root handle 1: htb default 10
	ip netns exec $NS-r$r tc class add dev v$r parent 1: classid 1:10 htb rate 10gbit
	ip netns exec $NS-r$r tc class add dev v$r parent 1: classid 1:20 htb rate 200mbit ceil 200mbit
	ip netns exec $NS-r$r tc filter add dev v$r parent 1: protocol ip u32 match ip dst $NET.$((10 + next))/32 flowid 1:20
	for k in 0 1 2 3; do rank $k "$dir" -iters 25 -bytes "$bytes"; done
	waitall
	label <<-EOF
	{"injected": "htb on rank $r's interface: its traffic to rank $next (u32 filter on the destination) limited to 200 Mbit/s for the whole run (25 all-reduces of $bytes B): link $r->$next only",
	 "expect": [{"kinds": ["backpressure", "slow_link"], "rank": $r, "peer": $next}]}
	EOF
}

scenario_ingress() {
	begin ingress
	world=4
	netup $world
	local r bytes prev
	r=$(pick 4)
	bytes=$(size)
	prev=$(((r + world - 1) % world))
	# Rank r's ingress: the switch's port towards it.
	local add="ip netns exec $NS-sw tc qdisc add dev s$r root tbf rate 200mbit burst 64kb latency 100ms"
	local del="ip netns exec $NS-sw tc qdisc del dev s$r root"
	for k in 0 1 2 3; do
		rank $k "$dir" -iters 40 -bytes "$bytes" -inject-rank "$r" -inject-iter 15 -inject-cmd "$add" -heal-iter 30 -heal-cmd "$del"
	done
	waitall
	label <<-EOF
	{"injected": "tc tbf 200 Mbit/s on the switch port to rank $r (its ingress) from all-reduce 15 to 30 of 40 ($bytes B, 4-rank ring): link $prev->$r",
	 "expect": [{"kinds": ["backpressure", "slow_link"], "rank": $prev, "peer": $r}]}
	EOF
}

scenario_two-faults() {
	begin two-faults
	world=4
	netup $world
	local r f bytes next
	r=$(pick 4)
	f=$(((r + 2) % world)) # not an end of r's ring link
	bytes=$(size)
	next=$(((r + 1) % world))
	ip netns exec $NS-r$r tc qdisc add dev v$r root tbf rate 200mbit burst 64kb latency 100ms
	for k in 0 1 2 3; do rank $k "$dir" -iters 40 -bytes "$bytes" -freeze-rank "$f" -freeze-iter 20 -freeze-for 1s; done
	waitall
	label <<-EOF
	{"injected": "tc tbf 200 Mbit/s on rank $r's interface for the whole run, and rank $f's process stopped for 1 s in all-reduce 20 of 40 ($bytes B): link $r->$next and rank $f",
	 "expect": [{"kinds": ["backpressure", "slow_link"], "rank": $r, "peer": $next}, {"kinds": ["stall", "straggler"], "rank": $f, "peer": -1}]}
	EOF
}

all=(clean-4r clean-2ch tbf-mid-4r tbf-start-4r latency-4r straggler-4r hol-2r)
for s in "${@:-${all[@]}}"; do
	for run in $(seq "$runs"); do
		seed=$((run + ${VCCL_CORPUS_SEED:-0}))
		"scenario_$s"
		cleanup
		du -sh "$dir"
	done
done
