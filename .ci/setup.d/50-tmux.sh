#!/usr/bin/env bash
# Installs tmux (Debian package tmux): vccl-top's end-to-end tests run it in
# a tmux session of their own and read the screen with capture-pane.
set -euo pipefail
if command -v tmux >/dev/null 2>&1; then
	echo "tmux: $(command -v tmux) (installed)"
	exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends tmux >/dev/null
echo "tmux: $(command -v tmux)"
