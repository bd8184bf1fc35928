"""What the process that launched a sweep learns of its jobs, whichever launcher ran them.

A module of its own so that ``python -m fedrun.cli`` (where the CLI module is ``__main__``) and the callback Hydra
instantiates from ``conf/config.yaml`` share one list.
"""

from __future__ import annotations

import json
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
