#!/usr/bin/env bash
# Node.js and the apache-arrow npm package, for exporter/arrow's test that
# reads traces with a second, independent Arrow implementation
# (exporter/arrow/node_test.go). Installs into exporter/arrow/testdata/node/
# (node_modules is gitignored), exactly what its package-lock.json pins.
set -euo pipefail
cd "$(dirname "$0")/../.."
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm >/dev/null
fi
cd exporter/arrow/testdata/node
if node -e '
	const want = require("./package-lock.json").packages["node_modules/apache-arrow"].version;
	const got = require("./node_modules/apache-arrow/package.json").version;
	process.exit(got === want ? 0 : 1);' 2>/dev/null; then
	echo "apache-arrow $(node -p 'require("./node_modules/apache-arrow/package.json").version') already installed"
	exit 0
fi
npm ci --no-audit --no-fund --loglevel=error
