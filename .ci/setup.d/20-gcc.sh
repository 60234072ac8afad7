#!/usr/bin/env bash
# Installs gcc and g++ (Debian packages gcc, g++): cmd/libnccl's test builds
# libnccl.so.2 with cgo and links C and C++ programs against it.
set -euo pipefail
if command -v gcc >/dev/null 2>&1 && command -v g++ >/dev/null 2>&1; then
	echo "gcc: $(command -v gcc), g++: $(command -v g++) (installed)"
	exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends gcc g++ libc6-dev >/dev/null
echo "gcc: $(command -v gcc), g++: $(command -v g++)"
