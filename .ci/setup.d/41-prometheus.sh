#!/usr/bin/env bash
# Installs the Prometheus server and promtool (both in the Debian package
# prometheus) that exporter/prom's tests run: the server on 127.0.0.1 to
# scrape a job, promtool to lint its /metrics. The tests run the server
# binary directly with its own config and storage; the package's service is
# not needed and is left stopped where a service manager would start it.
set -euo pipefail
if command -v prometheus >/dev/null 2>&1 && command -v promtool >/dev/null 2>&1; then
	echo "prometheus: $(command -v prometheus), $(command -v promtool) (installed)"
	exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
# policy-rc.d 101: don't start the packaged service during the install.
policy=/usr/sbin/policy-rc.d
made_policy=0
if [ ! -e "$policy" ]; then
	printf '#!/bin/sh\nexit 101\n' >"$policy"
	chmod +x "$policy"
	made_policy=1
fi
apt-get install -y -qq --no-install-recommends prometheus >/dev/null
[ "$made_policy" = 1 ] && rm -f "$policy"
echo "prometheus: $(command -v prometheus), $(command -v promtool)"
