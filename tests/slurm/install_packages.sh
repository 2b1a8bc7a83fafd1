#!/usr/bin/env bash
# The Debian packages of the real-SLURM tests (munge, MariaDB + slurmdbd, slurmctld,
# slurmd, the client tools). Only the tests need them, never the workflow. Run as root;
# tests/test_slurm.py calls this when the tools are missing.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
# The browser test may install its packages at the same moment: one apt at a time.
exec 9>/tmp/grabrag-apt.lock
flock 9
apt-get update -qq
apt-get install -y -qq --no-install-recommends \
    slurmctld slurmd slurm-client slurmdbd munge mariadb-server
