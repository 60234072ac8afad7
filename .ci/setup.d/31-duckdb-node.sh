#!/usr/bin/env bash
# DuckDB's Node.js API (@duckdb/node-api, which ships the native DuckDB
# library), for vccl-analyze's test that runs SQL over the Parquet traces
# of a fresh job (cmd/vccl-analyze/duckdb_test.go). Installs into
# cmd/vccl-analyze/testdata/duckdb/ (node_modules is gitignored), exactly
# what its package-lock.json pins. Node.js and npm come from 30-arrow-node.sh.
set -euo pipefail
cd "$(dirname "$0")/../.."
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm >/dev/null
fi
cd cmd/vccl-analyze/testdata/duckdb
if node -e '
	const want = require("./package-lock.json").packages["node_modules/@duckdb/node-api"].version;
	const got = require("./node_modules/@duckdb/node-api/package.json").version;
	process.exit(got === want ? 0 : 1);' 2>/dev/null; then
	echo "@duckdb/node-api $(node -p 'require("./node_modules/@duckdb/node-api/package.json").version') already installed"
	exit 0
fi
npm ci --no-audit --no-fund --loglevel=error
