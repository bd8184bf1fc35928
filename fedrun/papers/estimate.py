"""How long an artefact's sweep would take on this machine (``fedrun-table <artefact> --estimate``), said before a
grid of many hours is started, and what a ``not_run`` reason of "too long here" can cite instead of a typed figure.

Each preset's first grid point (seed 0) runs twice, for one round and for three, as whole processes: start-up, data
and the final evaluation are in both, so the difference over two rounds is a round's cost (its evaluation included
where ``eval.every`` is 1) and the rest a job's fixed cost. A job of the sweep is then its fixed cost and ``fl.rounds``
rounds; the sweep, its grid points times its seeds. Three things the probes cannot see: the evaluations of a preset
that evaluates every k > 1 rounds, rounds that get cheaper or dearer as a run goes on (GIFT's tau), and a
simulated-time budget that ends a run before ``fl.rounds`` (the estimate is then an upper bound, and says so).
"""

from __future__ import annotations

import math
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from fedrun.config.overrides import override_key
from fedrun.errors import FedrunError
from fedrun.papers.artefacts import Artefact, grid, is_sweep, preset_config
from fedrun.rundir.report import duration

PROBE_ROUNDS = (1, 3)


@dataclass(frozen=True)
class Estimate:
    preset: str
    jobs: int  # grid points x seeds
    rounds: int  # a job's fl.rounds
    fixed_s: float = math.nan  # a job's cost besides its rounds: start-up, data, one evaluation
    round_s: float = math.nan  # one round, from the two probes
    budget: bool = False  # a simulated-time budget may end a job before fl.rounds: the figures are upper bounds
    absent: str = ""  # the dataset that is not on this machine (nothing probed)

    @property
    def job_s(self) -> float:
        return self.fixed_s + self.rounds * self.round_s

    @property
    def total_s(self) -> float:
        return self.jobs * self.job_s


def probe_command(preset: str, overrides: list[str], rounds: int, folder: Path) -> list[str]:
    """``fedrun`` on the preset's first grid point, seed 0 where seeds are swept, for ``rounds`` rounds into
    ``folder``, with the other overrides as given."""
    axes = grid(preset, overrides)
    kept = [o for o in overrides if not is_sweep(o) and override_key(o) not in axes
            and not override_key(o).startswith("hydra")]
    return [sys.executable, "-m", "fedrun.cli", f"experiment={preset}", *kept,
            *(f"{key}={values[0]}" for key, values in axes.items()), f"fl.rounds={rounds}", "progress=false",
            f"hydra.run.dir={folder}"]


def timed(command: list[str]) -> float:
    """Seconds the command takes as a whole process; a failure stops the estimate with the command's last words."""
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode:
        tail = "\n".join(done.stderr.strip().splitlines()[-5:])
        raise FedrunError(f"the probe `fedrun {' '.join(command[3:])}` failed:\n{tail}")
    return time.perf_counter() - started


def estimate(artefact: Artefact, overrides: list[str], run: Callable[[list[str]], float] = timed
             ) -> list[Estimate]:
    """Each of the artefact's presets, probed (:func:`probe_command` for 1 and 3 rounds, timed by ``run``) where its
    dataset is on this machine."""
    from fedrun.data import DATASETS, resolve_root

    found = []
    for preset in artefact.presets:
        cfg = preset_config(preset, overrides)
        jobs = math.prod(len(values) for values in grid(preset, overrides).values())
        shape = dict(preset=preset, jobs=jobs, rounds=int(cfg.fl.rounds),
                     budget=cfg.timing.name == "simulated" and cfg.timing.budget_s is not None)
        if not DATASETS[cfg.data.name].is_present(resolve_root(cfg.data.root)):
            found.append(Estimate(**shape, absent=cfg.data.name))
            continue
        with tempfile.TemporaryDirectory() as work:
            short, long = (run(probe_command(preset, overrides, r, Path(work) / f"rounds{r}")) for r in PROBE_ROUNDS)
        round_s = max(0.0, (long - short) / (PROBE_ROUNDS[1] - PROBE_ROUNDS[0]))
        found.append(Estimate(**shape, fixed_s=max(0.0, short - PROBE_ROUNDS[0] * round_s), round_s=round_s))
    return found


def span(seconds: float) -> str:
    """Seconds under two minutes, else as fedrun-report says a duration."""
    return f"{seconds:.0f} s" if seconds < 120 else duration(seconds)


def markdown(artefact: Artefact, found: list[Estimate], machine: str, command: str, commit: str = "unknown") -> str:
    rows = []
    for e in found:
        if e.absent:
            rows.append(f"| {e.preset} | {e.jobs} | {e.rounds} | – | – | – | – ({e.absent} is not here) |")
            continue
        bound = "up to " if e.budget else ""
        rows.append(f"| {e.preset} | {e.jobs} | {e.rounds} | {e.round_s:.2f} | {e.fixed_s:.1f} | "
                    f"{bound}{span(e.job_s)} | {bound}{span(e.total_s)} |")
    probed = [e for e in found if not e.absent]
    total = (f"\n\nIn all: {'up to ' if any(e.budget for e in probed) else ''}"
             f"{span(sum(e.total_s for e in probed))} of one process after another"
             if probed else "")
    return (f"# {artefact.name}: how long its sweep would take here\n\n`{command}` at commit {commit} on "
            f"{time.strftime('%Y-%m-%d')}, on {machine}: each preset's first "
            f"grid point (seed 0) run for {PROBE_ROUNDS[0]} and {PROBE_ROUNDS[1]} rounds, whole processes timed; a "
            "job is its fixed cost (start-up, data, the final evaluation) and its rounds, the sweep its jobs one "
            "after another. Not seen by the probes: the evaluations of a preset that evaluates every k > 1 rounds, "
            "rounds that change cost as a run goes on (GIFT's tau), and a simulated-time budget that ends a run early "
            "(\"up to\").\n\n"
            "| preset | jobs | rounds | s a round | s fixed a job | a job | the preset's jobs |\n"
            "|---|---|---|---|---|---|---|\n" + "\n".join(rows) + total + "\n")
