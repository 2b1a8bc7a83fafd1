"""Progress lines with rate and ETA for the long steps of a rule, written to its log.

The ETA counts only the work this run does: items taken from a checkpoint (a resumed
job) are counted as done but not timed, so a resumed job does not promise the speed of
reading a file.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field


def _duration(seconds: float) -> str:
    if seconds != seconds:  # NaN: no rate yet
        return "?"
    seconds = int(round(seconds))
    if seconds < 120:
        return f"{seconds} s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 120:
        return f"{minutes} min {seconds:02d} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"


@dataclass
class Progress:
    """``[done/total] share rate ETA (label)`` lines.

    ``step`` marks items computed now; ``skip`` marks items taken from a checkpoint.
    ``min_interval`` (seconds) throttles the lines of many small steps; the first and
    the last step always log.
    """

    total: int
    log: Callable[[str], None]
    unit: str = "calls"
    min_interval: float = 0.0
    done: int = 0
    computed: int = 0
    started: float = field(default_factory=time.perf_counter)
    last_logged: float = float("-inf")

    def skip(self, label: str, n: int = 1) -> None:
        self.done += n
        if not self.computed:
            # Nothing computed yet: the clock starts after the checkpoint was read.
            self.started = time.perf_counter()
        self._log(f"{label} (from checkpoint)", force=self.done >= self.total)

    def step(self, label: str, n: int = 1) -> None:
        self.done += n
        self.computed += n
        self._log(label, force=self.computed == n or self.done >= self.total)

    @property
    def rate(self) -> float:
        elapsed = time.perf_counter() - self.started
        return self.computed / elapsed if elapsed > 0 and self.computed else 0.0

    @property
    def eta_seconds(self) -> float:
        rate = self.rate
        return (self.total - self.done) / rate if rate else float("nan")

    def _log(self, label: str, force: bool) -> None:
        now = time.perf_counter()
        if not force and now - self.last_logged < self.min_interval:
            return
        self.last_logged = now
        share = 100 * self.done / self.total if self.total else 100.0
        self.log(
            f"[{self.done}/{self.total}] {share:5.1f}% {self.rate:.2f} {self.unit}/s, "
            f"ETA {_duration(self.eta_seconds)} ({label})"
        )
