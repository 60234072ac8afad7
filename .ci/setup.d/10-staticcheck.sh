#!/usr/bin/env bash
# Installs staticcheck (honnef.co/go/tools, built with go install through the
# Go proxy) at the version the Makefile pins: make lint runs it.
set -euo pipefail
cd "$(dirname "$0")/../.."
export PATH="/usr/local/go/bin:$HOME/go/bin:$PATH"
make -s staticcheck
