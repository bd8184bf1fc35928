"""What the process that launched a sweep learns of its jobs, whichever launcher ran them.

A module of its own so that ``python -m fedrun.cli`` (where the CLI module is ``__main__``) and the callback Hydra
instantiates from ``conf/config.yaml`` share one list.
"""

from __future__ import annotations

import json
from pathlib import Path

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from .results import SUMMARY_FILE

FAILED_JOBS: list[str] = []  # run directories of this sweep's failed jobs


class FailedJobs(Callback):
    """Collects a sweep's failed jobs in the process that launched it, from their ``summary.json``: jobs that ran in
    other processes or machines (joblib, submitit, Ray) cannot reach that process's exit status themselves.
    Registered in ``conf/config.yaml`` (``hydra.callbacks``)."""

    def on_multirun_start(self, config: DictConfig, **kwargs) -> None:
        self.before = self._summaries(config)  # a resubmitted sweep's old summaries, by modification time

    def on_multirun_end(self, config: DictConfig, **kwargs) -> None:
        for path, stamp in self._summaries(config).items():  # written by this sweep, and failed
            if self.before.get(path) != stamp and json.loads(path.read_text()).get("status") == "failed":
                FAILED_JOBS.append(str(path.parent))

    @staticmethod
    def _summaries(config: DictConfig) -> dict[Path, int]:
        return {p: p.stat().st_mtime_ns for p in sorted(Path(config.hydra.sweep.dir).rglob(SUMMARY_FILE))}
