#!/usr/bin/env bash
# Installs Open MPI's mpirun (Debian package openmpi-bin): collective's
# TestMpirun runs a job under it with none of MASTER_ADDR, MASTER_PORT or a
# job token, as users run programs unchanged under mpirun.
set -euo pipefail
if command -v mpirun >/dev/null 2>&1; then
	echo "mpirun: $(command -v mpirun) (installed)"
	exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends openmpi-bin >/dev/null
echo "mpirun: $(command -v mpirun)"
