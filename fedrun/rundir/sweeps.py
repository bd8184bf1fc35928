"""What the process that launched a sweep learns of its jobs, whichever launcher ran them, and where a sweep is.

A module of its own so that ``python -m fedrun.cli`` (where the CLI module is ``__main__``) and the callback Hydra
instantiates from ``conf/config.yaml`` share one list; ``fedrun-report`` and ``fedrun-table`` say where a running sweep
is (:func:`sweep_progress`).
"""

from __future__ import annotations

import itertools
import json
import math
import statistics
from collections import Counter
from pathlib import Path

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from fedrun.rundir.files import COMPLETE, REFUSED_FILE, SUMMARY_FILE, overridden

SEED_KEY = "seed"  # a sweep's replicate axis: its runs at one grid point differ only in it

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


def sweep_progress(folder: Path, grid: dict[str, list[str]] | None, now: float | None = None) -> str:
    """Where a sweep over ``grid`` (key -> values; each combination a job) into ``folder`` is: how many runs are
    complete, failed, interrupted (checkpointed), running (each one's round) or still to start, and roughly how long
    it has left, shared by as many runs at a time as are running now. A run's length is taken from the complete runs
    of its grid point (its other seeds) where there are some: a run's pace can change as it goes (GIFT's tau
    shrinks); otherwise a running run has its rounds left at its recent pace to go, and a run still to start takes as
    long as the running runs of its point, or all the runs so far. Without ``grid`` (a sweeper that does not list its
    jobs beforehand) it says what has started."""
    from fedrun.rundir.progress import duration, find_runs, pace  # pandas: not on the CLI's start-up path

    point_keys = [k for k, values in (grid or {}).items() if k != SEED_KEY and len(values) > 1]
    complete, failed, interrupted, rounds = 0, 0, 0, []
    started: Counter = Counter()  # runs complete, failed or running, by grid point (None: off the grid)
    done: dict[tuple | None, list[float]] = {}  # the complete runs' lengths, by grid point
    going: list[tuple[tuple | None, float, float]] = []  # the running runs' points, seconds so far and seconds left
    for d in find_runs([str(folder)]) if folder.exists() else []:
        summary = json.loads((d / SUMMARY_FILE).read_text()) if (d / SUMMARY_FILE).exists() else {}
        status, point = summary.get("status"), _grid_point(d, grid, point_keys)
        if status in COMPLETE:
            complete += 1
            done.setdefault(point, []).append(summary.get("total_wall_time_s", summary.get("wall_time_s")) or 0.0)
        elif status == "running" and (at := pace(d, now)) is not None and not at.stalled:
            rounds.append(f"{at.round}/{at.planned}" if at.planned else str(at.round))
            if at.left_s is not None:
                going.append((point, at.spent_s, at.left_s))
        elif status == "failed":
            failed += 1
        elif status == "interrupted":  # stopped with a checkpoint: resume=true continues it
            interrupted += 1
        else:  # gone silent: to start again
            continue
        started[point] += 1
    jobs = math.prod(len(v) for v in grid.values()) if grid is not None else None
    to_start = max(0, jobs - complete - failed - interrupted - len(rounds)) if jobs is not None else 0
    parts = [f"{complete}{'' if jobs is None else f' of {jobs}'} runs complete"]
    parts += [f"{failed} failed"] if failed else []
    parts += [f"{interrupted} interrupted (checkpointed: resume=true continues {'them' if interrupted > 1 else 'it'})"
              ] if interrupted else []
    parts += [f"{len(rounds)} running (round{'s' * (len(rounds) > 1)} {', '.join(rounds)})"] if rounds else []
    parts += [f"{to_start} to start"] if to_start else []
    text = ", ".join(parts)
    length = {p: sum(ts) / len(ts) for p, ts in done.items() if sum(ts) > 0}  # a complete run's, by point
    left = [max(0.0, length[p] - spent) if p in length else rest for p, spent, rest in going]
    for p, spent, rest in going:  # points without a complete run: as long as their running runs will have taken
        length.setdefault(p, statistics.mean(s + r for q, s, r in going if q == p))
    if rounds and length:
        mean = statistics.mean(length.values())
        seeds = len(grid.get(SEED_KEY, [None])) if grid else 0
        missing = {p: max(0, seeds - started[p]) for p in itertools.product(*(grid[k] for k in point_keys))} \
            if grid else {}
        if sum(missing.values()) == to_start:  # every run placed on the grid
            ahead = sum(n * length.get(p, mean) for p, n in missing.items())
        else:
            ahead = to_start * mean
        text += f"; roughly {duration((sum(left) + ahead) / len(rounds))} left at {len(rounds)} at a time"
    return text


def _grid_point(run_dir: Path, grid: dict[str, list[str]] | None, point_keys: list[str]) -> tuple | None:
    """The run's values of the grid's swept keys other than the seed, from the overrides Hydra recorded for it; None
    when it has no such record or lies off the grid."""
    if not grid:
        return None
    given = overridden(run_dir)
    point = tuple(given.get(k) for k in point_keys)
    return point if all(v in grid[k] for v, k in zip(point, point_keys)) else None


def planned_grid(sweep_dir: str | Path) -> dict[str, list[str]] | None:
    """The grid of the ``fedrun -m`` sweep into ``sweep_dir`` (key -> values, every combination a job): its sweeper's
    ``params`` with the sweeps on its command line, as Hydra's basic sweeper combines them (from the ``multirun.yaml``
    Hydra writes there); None without that file, or for a sweeper that picks its jobs as it goes."""
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
        axes[o.key_or_group] = [str(v) for v in o.sweep_string_iterator()] if o.is_sweep_override() else \
            [o.input_line.split("=", 1)[1]]
    return axes
