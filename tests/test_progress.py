"""Progress lines: rate and ETA count only the work this run computes."""

from __future__ import annotations

import time

import pytest

from grabrag.core.progress import Progress


def test_eta_after_a_resume_counts_only_the_remaining_work() -> None:
    lines: list[str] = []
    progress = Progress(total=10, log=lines.append)
    progress.skip("q0-q5", n=6)  # six calls from a checkpoint, read instantly
    assert progress.rate == 0.0 and progress.eta_seconds != progress.eta_seconds  # no rate yet
    time.sleep(0.2)
    progress.step("q6")
    # one computed call in ~0.2 s, three left: ~0.6 s, not the 0.4 s that counting the
    # checkpointed calls as work would promise (6 + 1 calls in 0.2 s)
    assert progress.eta_seconds == pytest.approx(3 * 0.2, rel=0.5)
    assert progress.eta_seconds > 0.45
    assert lines[0].startswith("[6/10]") and lines[0].endswith("(q0-q5 (from checkpoint))")
    assert lines[1].startswith("[7/10]  70.0%") and "ETA" in lines[1]


def test_throttled_lines_still_log_the_first_and_the_last_step() -> None:
    lines: list[str] = []
    progress = Progress(total=100, log=lines.append, unit="passages", min_interval=3600)
    for _ in range(100):
        progress.step("embedding")
    assert len(lines) == 2
    assert lines[0].startswith("[1/100]") and lines[1].startswith("[100/100] 100.0%")
    assert "passages/s" in lines[1]
