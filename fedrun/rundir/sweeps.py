"""What the process that launched a sweep learns of its jobs, whichever launcher ran them, and where a sweep is.

A module of its own so that ``python -m fedrun.cli`` (where the CLI module is ``__main__``) and the callback Hydra
instantiates from ``conf/config.yaml`` share one list; ``fedrun-report`` and ``fedrun-table`` say where a running sweep
is (:func:`sweep_progress`).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from fedrun.rundir.files import REFUSED_FILE, SUMMARY_FILE

FAILED_JOBS: list[str] = []  # run directories of this sweep's failed or refused jobs


class FailedJobs(Callback):
    """Collects a sweep's failed jobs in the process that launched it, from their ``summary.json`` (status failed)
    and ``refused.json`` (a finished run of another config in the job's folder): jobs that ran in other processes or
    machines (joblib, submitit, Ray) cannot reach that process's exit status themselves. Registered in
    ``conf/config.yaml`` (``hydra.callbacks``)."""

    def on_multirun_start(self, config: DictConfig, **kwargs) -> None:
        self.before = self._reports(config)  # a resubmitted sweep's old files, by modification time

    def on_multirun_end(self, config: DictConfig, **kwargs) -> None:
        for path, stamp in self._reports(config).items():  # written by this sweep, and not a complete run
            if self.before.get(path) != stamp and json.loads(path.read_text()).get("status") in ("failed", "refused"):
                FAILED_JOBS.append(str(path.parent))

    @staticmethod
    def _reports(config: DictConfig) -> dict[Path, int]:
        root = Path(config.hydra.sweep.dir)
        return {p: p.stat().st_mtime_ns for name in (SUMMARY_FILE, REFUSED_FILE) for p in sorted(root.rglob(name))}


def sweep_progress(folder: Path, jobs: int | None, now: float | None = None) -> str:
    """Where a sweep of ``jobs`` runs into ``folder`` is: how many are complete, failed, running (each one's round) or
    still to start, and roughly how long it has left: the running runs' rounds left at their pace, and each run to
    start as long as the runs so far took or will take on average, shared by as many at a time as are running now.
    Without ``jobs`` (a sweeper that does not list its jobs beforehand) it says what has started."""
    from fedrun.rundir.report import COMPLETE, duration, find_runs, pace  # pandas: not on the CLI's start-up path

    complete, failed, totals, left, rounds = 0, 0, [], 0.0, []
    for d in find_runs([str(folder)]) if folder.exists() else []:
        summary = json.loads((d / SUMMARY_FILE).read_text()) if (d / SUMMARY_FILE).exists() else {}
        if summary.get("status") in COMPLETE:
            complete += 1
            totals.append(summary.get("total_wall_time_s", summary.get("wall_time_s")))
            continue
        at = pace(d, now)
        if summary.get("status") != "running" or at is None or at.stalled:
            failed += summary.get("status") == "failed"
            continue
        rounds.append(f"{at.round}/{at.planned}" if at.planned else str(at.round))
        if at.left_s is not None:
            left += at.left_s
            totals.append(at.seconds_per_round * at.planned)
    totals = [t for t in totals if t]
    to_start = max(0, jobs - complete - failed - len(rounds)) if jobs is not None else 0
    parts = [f"{complete}{'' if jobs is None else f' of {jobs}'} runs complete"]
    parts += [f"{failed} failed"] if failed else []
    parts += [f"{len(rounds)} running (round{'s' * (len(rounds) > 1)} {', '.join(rounds)})"] if rounds else []
    parts += [f"{to_start} to start"] if to_start else []
    text = ", ".join(parts)
    if rounds and totals:
        seconds = (left + to_start * sum(totals) / len(totals)) / len(rounds)
        text += f"; roughly {duration(seconds)} left at {len(rounds)} at a time"
    return text


def planned_jobs(sweep_dir: str | Path) -> int | None:
    """How many jobs the ``fedrun -m`` sweep into ``sweep_dir`` launches: the product of its sweeps' lengths, its
    sweeper's ``params`` with the sweeps on its command line, as Hydra's basic sweeper combines them (from the
    ``multirun.yaml`` Hydra writes there); None without that file, or for a sweeper that picks its jobs as it goes."""
    import yaml
    from hydra.core.override_parser.overrides_parser import OverridesParser

    path = Path(sweep_dir) / "multirun.yaml"
    if not path.exists():
        return None
    hydra = (yaml.safe_load(path.read_text()) or {}).get("hydra") or {}
    sweeper = hydra.get("sweeper") or {}
    if not str(sweeper.get("_target_", "")).endswith("BasicSweeper"):
        return None
    lines = [f"{k}={v}" for k, v in (sweeper.get("params") or {}).items()]
    lines += list((hydra.get("overrides") or {}).get("task") or [])
    axes = {}
    for o in OverridesParser.create().parse_overrides(lines):
        axes[o.key_or_group] = len(list(o.sweep_string_iterator())) if o.is_sweep_override() else 1
    return math.prod(axes.values())
