"""Where a finished run's time went, per rule: jobs, wall time, and the share of it that
was a job's fixed cost (starting a Python process, Snakemake's script preamble, imports,
and Snakemake's own bookkeeping around the job) against its real work.

    python benchmarks/job_costs.py [RUN_DIR]     # default: this checkout

It reads the run's newest Snakemake log that ran jobs (.snakemake/log/*.snakemake.log:
each job's rule, start, finish and log file) and each job's rule log (results/logs/...),
whose last line says how long the job's work took ("rule X done in S s") and, since the
rule scripts log it, how long the process took to reach its work ("started in S s").
Where a rule log lacks the latter (runs from before it was logged), the job's first log
line stands in for the moment its work began. The Snakemake log's times have one-second
resolution: single short jobs are rough, sums over a rule's jobs are what to read. Jobs
that write a benchmark file (results/benchmarks/... beside results/logs/..., the model
jobs) take their wall time from it.
"""

from __future__ import annotations

import argparse
import csv
import re
import sys
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

STAMP = re.compile(r"^\[(\w{3} \w{3} [ \d]\d \d\d:\d\d:\d\d \d{4})\]$")
RULE = re.compile(r"^(?:local)?rule (\w+):$")
FINISHED = re.compile(r"^Finished jobid: (\d+) \(Rule: (\w+)\)$")
LOG_LINE = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) ")
DONE = re.compile(r"rule \w+ done in ([\d.]+) s")
STARTED = re.compile(r"started in ([\d.]+) s")


@dataclass
class Job:
    rule: str
    start: datetime
    finish: datetime | None = None
    log: str | None = None

    @property
    def wall(self) -> float:
        return (self.finish - self.start).total_seconds() if self.finish else 0.0


def _stamp(text: str) -> datetime:
    return datetime.strptime(" ".join(text.split()), "%a %b %d %H:%M:%S %Y")


def read_snakemake_log(path: Path) -> tuple[dict[int, Job], float]:
    jobs: dict[int, Job] = {}
    stamp: datetime | None = None
    current: Job | None = None
    first = last = None
    for line in path.read_text(encoding="utf-8").splitlines():
        if found := STAMP.match(line):
            stamp = _stamp(found.group(1))
            first = first or stamp
            last = stamp
            current = None
        elif (found := RULE.match(line)) and stamp is not None:
            current = Job(found.group(1), stamp)
        elif current is not None and line.startswith("    log: "):
            current.log = line.removeprefix("    log: ").split(", ")[0].split(" (")[0]
        elif current is not None and line.startswith("    jobid: "):
            jobs[int(line.split(":")[1])] = current
        elif (found := FINISHED.match(line)) and stamp is not None:
            job = jobs.get(int(found.group(1)))
            if job is not None:
                job.finish = stamp
    span = (last - first).total_seconds() if first and last else 0.0
    return jobs, span


def work_seconds(run_dir: Path, job: Job) -> tuple[float, float | None]:
    """(seconds of work, seconds from process start to work or None) from the rule log."""
    if not job.log or not (run_dir / job.log).is_file():
        return 0.0, None
    lines = (run_dir / job.log).read_text(encoding="utf-8", errors="replace").splitlines()
    work = started = None
    first_line = None
    for line in lines:
        if first_line is None and (stamp := LOG_LINE.match(line)):
            first_line = datetime.strptime(stamp.group(1), "%Y-%m-%d %H:%M:%S,%f")
        if found := DONE.search(line):
            work = float(found.group(1))
        if found := STARTED.search(line):
            started = float(found.group(1))
    if started is None and first_line is not None:
        started = max(0.0, (first_line - job.start).total_seconds())
    return work or 0.0, started


def benchmark_wall(run_dir: Path, job: Job) -> float | None:
    """The job's wall time from its benchmark file, which the rules keep beside the log
    path (results/benchmarks/... for results/logs/...)."""
    if not job.log or not job.log.startswith("results/logs/"):
        return None
    path = run_dir / ("results/benchmarks/" + job.log.removeprefix("results/logs/"))
    path = path.with_suffix(".tsv")
    if not path.is_file():
        return None
    with path.open() as handle:
        rows = list(csv.DictReader(handle, delimiter="\t"))
    return float(rows[0]["s"]) if rows else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dir", nargs="?", default=".", type=Path)
    args = parser.parse_args()
    # the newest log that ran jobs (`snakemake --report` writes one that runs none)
    logs = [
        path
        for path in sorted((args.run_dir / ".snakemake" / "log").glob("*.snakemake.log"))
        if "Finished jobid" in path.read_text(encoding="utf-8", errors="replace")
    ]
    if not logs:
        sys.exit(f"no Snakemake log of a run under {args.run_dir}/.snakemake/log: run first")
    jobs, span = read_snakemake_log(logs[-1])
    per_rule: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for job in jobs.values():
        if job.finish is None:
            continue
        wall = benchmark_wall(args.run_dir, job) or job.wall
        work, started = work_seconds(args.run_dir, job)
        row = per_rule[job.rule]
        row["jobs"] += 1
        row["wall"] += wall
        row["work"] += min(work, wall) if wall else work
        row["startup"] += started or 0.0
    print(f"{logs[-1].name}: {len(jobs)} jobs, {span:.0f} s from first to last log line")
    header = ("rule", "jobs", "wall s", "work s", "fixed s", "fixed %", "to work s/job")
    print("{:<26} {:>5} {:>8} {:>8} {:>8} {:>7} {:>13}".format(*header))
    totals = defaultdict(float)
    for rule, row in sorted(per_rule.items(), key=lambda item: -item[1]["wall"]):
        fixed = max(0.0, row["wall"] - row["work"])
        for key in ("jobs", "wall", "work"):
            totals[key] += row[key]
        totals["fixed"] += fixed
        share = 100 * fixed / row["wall"] if row["wall"] else 0.0
        print(
            f"{rule:<26} {row['jobs']:>5.0f} {row['wall']:>8.1f} {row['work']:>8.1f} "
            f"{fixed:>8.1f} {share:>6.0f}% {row['startup'] / row['jobs']:>13.2f}"
        )
    share = 100 * totals["fixed"] / totals["wall"] if totals["wall"] else 0.0
    print(
        f"{'total':<26} {totals['jobs']:>5.0f} {totals['wall']:>8.1f} {totals['work']:>8.1f} "
        f"{totals['fixed']:>8.1f} {share:>6.0f}%"
    )
    print("wall and work are summed over jobs; jobs run side by side, so sums exceed the span")


if __name__ == "__main__":
    main()
