#!/usr/bin/env bash
# Debian's Chromium and ChromeDriver for the report's browser test
# (tests/test_report_pages.py). Only the tests need them, never the workflow. Run as root;
# the test calls this when either is missing.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
# The SLURM tests may install their packages at the same moment: one apt at a time.
exec 9>/tmp/grabrag-apt.lock
flock 9
apt-get update -qq
apt-get install -y -qq chromium chromium-driver
