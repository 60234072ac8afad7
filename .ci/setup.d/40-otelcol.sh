#!/usr/bin/env bash
# Builds the OpenTelemetry Collector that exporter/otel's tests send spans to,
# from exporter/otel/testdata/collector/builder.yaml, with the collector
# builder. The binary is cached outside the repo, keyed by the manifest's
# hash, and linked as $VCCL_CACHE/otelcol-vccl (default ~/.cache/vccl), where
# the test looks for it; nothing is rebuilt while the manifest is unchanged.
# The first build downloads many modules and takes minutes on two cores.
set -euo pipefail
cd "$(dirname "$0")/../.."
export PATH="/usr/local/go/bin:$HOME/go/bin:$PATH"
manifest=exporter/otel/testdata/collector/builder.yaml
builder_version=v0.161.0 # the collector modules' release in the manifest
cache="${VCCL_CACHE:-$HOME/.cache/vccl}"
sum=$( (echo "$builder_version"; cat "$manifest") | sha256sum | cut -c1-16)
out="$cache/otelcol-vccl-$sum"
link="$cache/otelcol-vccl"
if [ -x "$out/otelcol-vccl" ]; then
	ln -sfn "$out/otelcol-vccl" "$link"
	echo "otelcol: $link (cached)"
	exit 0
fi
mkdir -p "$cache/bin"
if [ ! -x "$cache/bin/builder-$builder_version" ]; then
	GOBIN="$cache/bin" GOFLAGS=-mod=mod go install "go.opentelemetry.io/collector/cmd/builder@$builder_version"
	mv "$cache/bin/builder" "$cache/bin/builder-$builder_version"
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
sed "s#^\(  output_path:\).*#\1 $tmp/build#" "$manifest" >"$tmp/builder.yaml"
# The generated module lives in $tmp: no VCS stamping, no workspace.
(cd "$tmp" && GOWORK=off GOFLAGS=-buildvcs=false "$cache/bin/builder-$builder_version" --config="$tmp/builder.yaml")
mkdir -p "$out.tmp"
mv "$tmp/build/otelcol-vccl" "$out.tmp/otelcol-vccl"
rm -rf "$out"
mv "$out.tmp" "$out"
ln -sfn "$out/otelcol-vccl" "$link"
echo "otelcol: built $link"
