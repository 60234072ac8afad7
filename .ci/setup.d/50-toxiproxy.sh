#!/usr/bin/env bash
# Installs toxiproxy-server (Shopify/toxiproxy v2.5.0, built with go install)
# for transport/ft's tests that reset connections and add latency through
# it. It lands in ~/.cache/vccl-tools, where the tests look (or set
# TOXIPROXY_SERVER to another binary).
set -euo pipefail
version=v2.5.0
dir="${HOME}/.cache/vccl-tools"
bin="$dir/toxiproxy-server"
stamp="$bin.version"
if [ -x "$bin" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$version" ]; then
	echo "toxiproxy-server: $bin ($version, installed)"
	exit 0
fi
mkdir -p "$dir"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
GOBIN="$tmp" GOFLAGS=-buildvcs=false go install "github.com/Shopify/toxiproxy/v2/cmd/server@$version"
mv "$tmp/server" "$bin"
echo "$version" >"$stamp"
echo "toxiproxy-server: $bin ($version)"
