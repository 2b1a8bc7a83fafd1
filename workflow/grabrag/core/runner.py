"""The one wrapper every rule script goes through: logging and clean user errors."""

from __future__ import annotations

import logging
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from grabrag.core import devices
from grabrag.core.errors import GrabragError
from grabrag.core.plugins import config_modules, load_modules

log = logging.getLogger("grabrag")


def setup_logging(log_file: str | None) -> None:
    handlers: list[logging.Handler] = [logging.StreamHandler(sys.stderr)]
    if log_file:
        handlers.append(logging.FileHandler(log_file, mode="w", encoding="utf-8"))
    logging.basicConfig(
        level=logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        handlers=handlers,
        force=True,
    )


def seconds_since_process_start() -> float | None:
    """How long ago this process started (Linux's /proc; None elsewhere): what a job spent
    on the interpreter, Snakemake's script preamble and the imports before its work."""
    # The process's start in clock ticks since boot, against the clock that counts from
    # boot: /proc/stat's btime (whole seconds of wall-clock time) would add a constant error
    # of up to a second (0.6 s measured here) to every job's figure.
    try:
        ticks = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19])
        since_boot = time.clock_gettime(time.CLOCK_BOOTTIME)
    except (OSError, ValueError, IndexError, AttributeError):
        return None
    return max(0.0, since_boot - ticks / os.sysconf("SC_CLK_TCK"))


def run_rule(smk: Any, main: Callable[[Any], None]) -> None:
    """Call ``main(snakemake)``; a GrabragError becomes one clear line and exit status 1.
    The config's modules are loaded first: a job runs in a process of its own."""
    setup_logging(smk.log[0] if len(smk.log) else None)
    startup = seconds_since_process_start()
    if startup is not None:
        # benchmarks/job_costs.py reads this line: a job's fixed cost against its work
        log.info("rule %s started in %.2f s", smk.rule, startup)
    if devices.CLAIM is not None:
        log.info(devices.CLAIM.describe())
    started = time.perf_counter()
    try:
        load_modules(config_modules(smk.config), smk.config)
        main(smk)
    except GrabragError as error:
        log.error("rule %s failed: %s", smk.rule, error)
        sys.exit(1)
    log.info("rule %s done in %.1f s", smk.rule, time.perf_counter() - started)
