"""How long an artefact's sweep would take on this machine (``fedrun-table <artefact> --estimate``), said before a
grid of many hours is started, and what a ``not_run`` reason of "too long here" can cite instead of a typed figure.

Each preset's first grid point (seed 0) runs for three rounds, each evaluated, as a whole process. The run's own
clock (``metrics.csv``'s ``elapsed_s`` after each round) gives a round's cost, its evaluation included, as the mean of
rounds 2 and 3; the first round's extra cost (warm-up) and what the process spends outside the rounds (start-up, data,
files) are a job's fixed cost. A job of the sweep is then its fixed cost and ``fl.rounds`` rounds; the sweep, its grid
points times its seeds. A run that a simulated-time budget ends (``timing.budget_s``) is given as many rounds as the
budget holds of the probe's simulated seconds a round: where a schedule shortens its rounds (GIFT's tau) it runs more
of them, each cheaper, at about the same wall time per simulated second. What one probe cannot see: rounds that get
cheaper or dearer as a run goes on without a budget; a preset that evaluates every k > 1 rounds costs somewhat less.

A probe's figure is only as good as the machine was quiet: what other processes kept the cores busy while each probe
ran (the system's busy CPU time less the probe's own) is recorded beside it, and a busy machine is warned about.
"""

from __future__ import annotations

import csv
import math
import os
import resource
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
from fedrun.rundir.progress import duration

PROBE_ROUNDS = 3
BUSY_CORES = 0.5  # other processes' mean busy cores during a probe above which the estimate is warned about


@dataclass(frozen=True)
class Estimate:
    preset: str
    jobs: int  # grid points x seeds
    rounds: int  # a job's rounds: fl.rounds, or as many as its simulated-time budget holds
    fixed_s: float = math.nan  # a job's cost besides its rounds: start-up, data, files, the first round's warm-up
    round_s: float = math.nan  # one round and its evaluation, from the probe's rounds 2 and 3
    budget: bool = False  # the rounds are the budget's, at the probe's simulated seconds a round
    absent: str = ""  # the dataset that is not on this machine (nothing probed)
    probed: str = ""  # the grid point the probe ran: "algo=fedavg, seed=0"
    busy: float = math.nan  # cores other processes kept busy on average while the probe ran (unknown: nan)

    @property
    def job_s(self) -> float:
        return self.fixed_s + self.rounds * self.round_s

    @property
    def total_s(self) -> float:
        return self.jobs * self.job_s


def first_point(axes: dict[str, list[str]]) -> list[str]:
    """A grid's first point (each swept key's first value: seed 0 where seeds are swept) as overrides."""
    return [f"{key}={values[0]}" for key, values in axes.items()]


def probe_command(preset: str, overrides: list[str], axes: dict[str, list[str]], folder: Path) -> list[str]:
    """``fedrun`` on the :func:`first_point` of the preset's grid ``axes`` (:func:`grid` with ``overrides``) for
    ``PROBE_ROUNDS`` rounds, each evaluated, into ``folder``, with the other overrides as given."""
    kept = [o for o in overrides if not is_sweep(o) and override_key(o) not in axes
            and not override_key(o).startswith("hydra")]
    return [sys.executable, "-m", "fedrun.cli", f"experiment={preset}", *kept, *first_point(axes),
            f"fl.rounds={PROBE_ROUNDS}", "eval.every=1", "eval.every_s=null", "progress=false",
            f"hydra.run.dir={folder}"]


def timed(command: list[str]) -> float:
    """Seconds the command takes as a whole process; a failure stops the estimate with the command's last words."""
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode:
        tail = "\n".join(done.stderr.strip().splitlines()[-5:])
        raise FedrunError(f"the probe `fedrun {' '.join(command[3:])}` failed:\n{tail}")
    return time.perf_counter() - started


def estimate(artefact: Artefact, overrides: list[str], run: Callable[[list[str]], float] = timed,
             say: Callable[[str], None] = lambda line: None) -> list[Estimate]:
    """Each of the artefact's presets, probed (:func:`probe_command`, its process timed by ``run``) where its dataset
    is on this machine; ``say`` is told each probe's start and end (a probe takes up to minutes) and any probe taken
    on a busy machine."""
    from fedrun.data import DATASETS, resolve_root

    found = []
    for i, preset in enumerate(artefact.presets, 1):
        cfg = preset_config(preset, overrides)
        axes = grid(preset, overrides)
        budget = cfg.timing.budget_s if cfg.timing.name == "simulated" else None
        shape = dict(preset=preset, jobs=math.prod(len(values) for values in axes.values()),
                     rounds=int(cfg.fl.rounds), probed=", ".join(first_point(axes)))
        if not DATASETS[cfg.data.name].is_present(resolve_root(cfg.data.root)):
            say(f"{preset} ({i} of {len(artefact.presets)}): {cfg.data.name} is not here, not probed")
            found.append(Estimate(**shape, absent=cfg.data.name))
            continue
        say(f"probing {preset} ({i} of {len(artefact.presets)}): {PROBE_ROUNDS} rounds of {shape['probed']} ...")
        with tempfile.TemporaryDirectory() as work:
            folder = Path(work) / "probe"
            before = cpu_seconds()
            process_s = run(probe_command(preset, overrides, axes, folder))
            busy = others_busy_cores(before, cpu_seconds())
            with (folder / "metrics.csv").open() as f:
                rows = list(csv.DictReader(f))
        if len(rows) != PROBE_ROUNDS:
            raise FedrunError(f"the probe of {preset} logged {len(rows)} of its {PROBE_ROUNDS} rounds")
        say(f"probed {preset} in {process_s:.0f} s" + ("" if math.isnan(busy) else
                                                         f"; other processes kept {busy:.1f} cores busy meanwhile"))
        if busy > BUSY_CORES:
            say(f"warning: other processes kept {busy:.1f} of {os.cpu_count()} cores busy while {preset} was probed: "
                "its figure is a busy machine's (longer than a quiet one's); estimate again when the machine is quiet")
        elapsed = [float(row["elapsed_s"]) for row in rows]
        round_s = (elapsed[-1] - elapsed[0]) / (PROBE_ROUNDS - 1)
        fixed_s = (process_s - elapsed[-1]) + max(0.0, elapsed[0] - round_s)
        sim = [float(row.get("sim_time_s") or 0) for row in rows]  # simulated seconds (timing=simulated)
        simulated = (sim[-1] - sim[0]) / (PROBE_ROUNDS - 1)
        if budget is not None and simulated > 0:  # as many rounds as the budget holds, at the probe's pace
            shape |= dict(rounds=min(shape["rounds"], math.ceil(budget / simulated)), budget=True)
        found.append(Estimate(**shape, fixed_s=fixed_s, round_s=round_s, busy=busy))
    return found


def cpu_seconds() -> tuple[float, float, float] | None:
    """Now: the wall clock, the CPU time every core of the machine has been busy (/proc/stat: all but idle and
    I/O wait) and the CPU time of this process's finished children (a probe, once waited for); None where the system
    does not say."""
    try:
        with open("/proc/stat") as f:
            ticks = [int(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    busy = (sum(ticks) - ticks[3] - (ticks[4] if len(ticks) > 4 else 0)) / os.sysconf("SC_CLK_TCK")
    return time.monotonic(), busy, children.ru_utime + children.ru_stime


def others_busy_cores(before, after) -> float:
    """The cores other processes than the probe (and this one) kept busy on average between two
    :func:`cpu_seconds`; nan where unknown."""
    if before is None or after is None or after[0] <= before[0]:
        return math.nan
    own = after[2] - before[2]  # the probe's CPU time (this process waits on it meanwhile)
    return max(0.0, (after[1] - before[1]) - own) / (after[0] - before[0])


def span(seconds: float) -> str:
    """Seconds under two minutes, else as fedrun-report says a duration."""
    return f"{seconds:.0f} s" if seconds < 120 else duration(seconds)


def markdown(artefact: Artefact, found: list[Estimate], machine: str, command: str, commit: str = "unknown") -> str:
    """The estimates as a table, with the command, commit, date and machine that made them and what they leave out."""
    rows = []
    for e in found:
        if e.absent:
            rows.append(f"| {e.preset} | {e.jobs} | {e.rounds} | – | – | – | – ({e.absent} is not here) | | |")
            continue
        rounds = f"{e.rounds} (its budget's)" if e.budget else f"{e.rounds}"
        rows.append(f"| {e.preset} | {e.jobs} | {rounds} | {e.round_s:.2f} | {e.fixed_s:.1f} | {span(e.job_s)} | "
                    f"{span(e.total_s)} | {e.probed} | {'–' if math.isnan(e.busy) else f'{e.busy:.1f}'} |")
    probed = [e for e in found if not e.absent]
    total = f"\n\nIn all: {span(sum(e.total_s for e in probed))} of one process after another" if probed else ""
    return (f"# {artefact.name}: how long its sweep would take here\n\n`{command}` at commit {commit} on "
            f"{time.strftime('%Y-%m-%d')}, on {machine}: each preset's first grid point (probed) run for "
            f"{PROBE_ROUNDS} rounds, each evaluated; a round is the mean of rounds 2 and 3 by the run's own clock, a "
            "job its fixed cost (start-up, data, files, the first round's warm-up) and its rounds, the sweep its "
            "jobs one after another; a run a simulated-time budget ends has as many rounds as the budget holds of the "
            "probe's simulated seconds a round (\"its budget's\"). Not seen by the probe: rounds that change cost as "
            "a run goes on without a budget; a preset evaluated every k > 1 rounds costs somewhat less. "
            f"\"Others' cores\": the cores (of {os.cpu_count()}) other processes kept busy on average while the probe "
            f"ran; a figure taken above {BUSY_CORES} is a busy machine's.\n\n"
            "| preset | jobs | rounds | s a round | s fixed a job | a job | the preset's jobs | probed "
            "| others' cores |\n"
            "|---|---|---|---|---|---|---|---|---|\n" + "\n".join(rows) + total + "\n")
