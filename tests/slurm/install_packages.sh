#!/usr/bin/env bash
# The Debian packages of the real-SLURM tests (munge, MariaDB + slurmdbd, slurmctld,
# slurmd, the client tools). Only the tests need them, never the workflow. Run as root;
# tests/test_slurm.py calls this when the tools are missing.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends \
    slurmctld slurmd slurm-client slurmdbd munge mariadb-server
