"""Where runs are: the run folders under some paths, a running run's pace and what is left of it, and a time span as
a person reads it; what fedrun-report, a sweep's progress lines and fedrun-table's estimates share."""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

import pandas as pd

from fedrun.rundir.files import CONFIG_FILE, METRICS_FILE, SUMMARY_FILE, saved_config


def find_runs(paths: list[str]) -> list[Path]:
    runs = []
    for p in map(Path, paths):
        if not p.exists():
            raise FileNotFoundError(f"{p} does not exist")
        candidates = [p] if (p / CONFIG_FILE).exists() else sorted(c.parent for c in p.rglob(CONFIG_FILE))
        runs += [c for c in candidates if (c / SUMMARY_FILE).exists() or (c / METRICS_FILE).exists()]
    return runs


PACE_ROUNDS = 20  # the latest rounds whose times give a running run's pace


class Pace(NamedTuple):
    """Where a running run is: its last logged round, the rounds its config plans (None when it names none), the
    median seconds of its latest rounds, how long ago it last logged one and the seconds its rounds so far took."""
    round: int
    planned: int | None
    seconds_per_round: float | None
    silent_s: float
    spent_s: float

    @property
    def stalled(self) -> bool:
        """Nothing logged for ten times a round's time, and at least five minutes: its process is probably gone."""
        return self.seconds_per_round is None or self.silent_s > max(10 * self.seconds_per_round, 300)

    @property
    def left_s(self) -> float | None:
        if self.planned is None or self.stalled:
            return None
        return self.seconds_per_round * max(0, self.planned - self.round)


def pace(run_dir: str | Path, now: float | None = None) -> Pace | None:
    """A run's :class:`Pace` from its metrics.csv (``elapsed_s``, over its latest PACE_ROUNDS rounds; a resumed
    process starts its clock again), or None before it has logged a round."""
    import time

    run_dir = Path(run_dir)
    path = run_dir / METRICS_FILE
    log = pd.read_csv(path) if path.exists() else None
    if log is None or log.empty or "elapsed_s" not in log:
        return None
    steps = log["elapsed_s"].diff()
    steps = steps[steps > 0]  # a resumed process's clock restart left out
    latest = steps.iloc[-PACE_ROUNDS:]
    return Pace(int(log["round"].iloc[-1]), (saved_config(run_dir).get("fl") or {}).get("rounds"),
                float(latest.median()) if len(latest) else None,
                (time.time() if now is None else now) - path.stat().st_mtime,
                float(log["elapsed_s"].iloc[0] + steps.sum()))


def progress(run_dir: str | Path, now: float | None = None) -> str:
    """Where a run whose summary says ``running`` is: its last round of the rounds planned and about how long it has
    left at the pace of its latest rounds; or, when it has gone silent (:attr:`Pace.stalled`), that its process is
    probably gone (killed, or its machine stopped)."""
    at = pace(run_dir, now)
    if at is None:
        return "still running, or killed"
    where = f"round {at.round}" + (f" of {at.planned}" if at.planned else "")
    if at.stalled:
        return f"{where}, then nothing logged for {duration(at.silent_s)}: probably killed"
    left = f", about {duration(at.left_s)} left at {at.seconds_per_round:.3g} s a round" if at.planned else ""
    return f"running: {where}{left}"


def duration(seconds: float) -> str:
    """A time span as a person reads it: minutes up to two hours, hours beyond."""
    minutes = round(seconds / 60)
    return f"{minutes} min" if minutes < 120 else f"{minutes / 60:.1f} h"
