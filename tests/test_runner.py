"""The rule scripts' runner: what a job logs about its own start-up."""

from __future__ import annotations

import subprocess
import sys
import time

from .conftest import REPO

# the clock-tick granularity of /proc/self/stat's start time (SC_CLK_TCK is 100 on Linux)
TICK = 0.011


def test_seconds_since_process_start_is_the_age_of_the_process() -> None:
    """benchmarks/job_costs.py reads each job's "started in S s": S is how long the job's
    process had run, not more (a clock with whole-second steps once added ~0.6 s to
    every job)."""
    code = (
        f"import sys, time; sys.path.insert(0, {str(REPO / 'workflow')!r}); "
        "from grabrag.core.runner import seconds_since_process_start; "
        "time.sleep(0.3); print(seconds_since_process_start())"
    )
    started = time.monotonic()
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    lived = time.monotonic() - started
    age = float(out.stdout)
    assert 0.3 <= age <= lived + TICK, (age, lived)
