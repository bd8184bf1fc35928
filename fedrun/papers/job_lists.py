"""A script's list of runs, launched as ``fedrun -m`` sweeps, so a study that is not a paper's table (the claims
scripts under ``scripts/``) runs on any Hydra launcher and skips finished jobs exactly as a sweep does.

A job is its list of overrides. Its folder is ``<runs>/<the overrides, sorted, comma-joined>``: Hydra's own
``override_dirname`` of the job, so the folder is known before anything runs and is the same whichever sweep the
job went in. Jobs whose override keys are the same and whose values form a grid go in one ``fedrun -m``; the rest in
as few grids as cover them. Overrides for every job (a launcher, ``hardware.num_threads``) are left out of the
folder's name, as ``fedrun-table`` leaves them out.
"""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

from fedrun.errors import FedrunError
from fedrun.config.overrides import override_key
from fedrun.rundir.files import finished_summary


def add_arguments(parser) -> None:
    """The options every script that runs a batch takes: ``--workers P`` and Hydra overrides for every job."""
    parser.add_argument("--workers", type=int, default=1,
                        help="jobs at once on this machine (hydra/launcher=parallel); or name a launcher below")
    parser.add_argument("overrides", nargs="*", help="Hydra overrides for every job: a launcher "
                        "(hydra/launcher=slurm), hardware settings; left out of the runs' folder names")


def every_job(args) -> list[str]:
    """The overrides a script's ``--workers`` and extra arguments add to every job."""
    extra = list(getattr(args, "overrides", []) or [])
    if args.workers > 1 and not any(o.startswith("hydra/launcher=") for o in extra):
        import torch

        extra = ["hydra/launcher=parallel", f"hydra.launcher.n_jobs={args.workers}",
                 f"hardware.num_threads={max(1, torch.get_num_threads() // args.workers)}", *extra]
    return extra


def folder_name(overrides: list[str]) -> str:
    """Hydra's ``override_dirname`` of a job with these overrides: each written as the sweeper writes it, sorted."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parser = OverridesParser.create()
    lines = []
    for text in overrides:
        o = parser.parse_override(text)
        lines.append(f"{o.get_key_element()}={o.get_value_element_as_str()}")
    return ",".join(sorted(lines))


def job_dir(overrides: list[str], runs: str | Path) -> str:
    """Where the job with these overrides runs under ``runs``."""
    return str(Path(runs) / folder_name(overrides))


def grids(jobs: list[list[str]]) -> list[dict[str, list[str]]]:
    """Cover the jobs by grids (key -> values; every combination is a job): jobs with the same keys whose values
    form a product are one grid; otherwise they are split by one key's value until each part is a product."""
    by_keys: dict[tuple, list[dict[str, str]]] = {}
    for job in jobs:
        values = dict(o.split("=", 1) for o in job)  # the key as written (``+key`` adds it)
        by_keys.setdefault(tuple(sorted(values)), []).append(values)
    out: list[dict[str, list[str]]] = []
    for members in by_keys.values():
        out += _split(members)
    return out


def _split(members: list[dict[str, str]]) -> list[dict[str, list[str]]]:
    keys = list(members[0])
    axes = {k: list(dict.fromkeys(m[k] for m in members)) for k in keys}
    distinct = {tuple(m[k] for k in keys) for m in members}
    if math.prod(len(v) for v in axes.values()) == len(distinct):
        return [axes]
    key = min((k for k in keys if len(axes[k]) > 1), key=lambda k: len(axes[k]))
    return [g for v in axes[key] for g in _split([m for m in members if m[key] == v])]


def run(jobs: list[list[str]], runs: str | Path, extra: list[str] = (), log=print) -> list[dict]:
    """Run every job not already finished in its folder (``job_dir``), through ``fedrun -m`` with ``extra`` on each;
    the jobs' summaries come back in job order. A folder holding a finished run of another config stops everything
    before any work (StaleRunError); a job that fails stops the script after the others ran, naming the folders, so
    that no table is made from part of its runs."""
    from fedrun.config.compose import compose_config

    runs, extra = Path(runs), [*extra, "resume=true"]
    task_extra = [o for o in extra if not override_key(o).startswith("hydra")]
    clash = sorted({override_key(o) for o in task_extra} & {override_key(o) for job in jobs for o in job})
    if clash:  # the later value would win, in a folder named by the script's
        raise FedrunError(f"{', '.join(clash)}: the script sets {'it' if len(clash) == 1 else 'them'} for its runs, "
                          "and its runs' folders are named by its values; an override for every job cannot change "
                          "that (use the script's own option, e.g. --rounds, or leave the override out)")
    dirs = [job_dir(job, runs) for job in jobs]
    todo = [job for job, d in zip(jobs, dirs) if finished_summary(d, compose_config([*job, *task_extra])) is None]
    sweeps = grids(todo)
    log(f"{len(jobs)} runs: {len(jobs) - len(todo)} already finished, {len(todo)} to run in {len(sweeps)} sweep(s)")
    exclude = sorted({override_key(o) for o in task_extra})
    for grid in sweeps:
        cmd = [sys.executable, "-m", "fedrun.cli", "-m", *(f"{k}={','.join(v)}" for k, v in grid.items()), *extra,
               f"hydra.sweep.dir={runs}", "hydra.sweep.subdir=${hydra.job.override_dirname}",
               f"hydra.job.config.override_dirname.exclude_keys=[{','.join(exclude)}]"]
        code = subprocess.run(cmd, check=False).returncode
        if code == 2:  # refused before any job ran; fedrun said why above
            raise FedrunError(f"fedrun refused the sweep {' '.join(cmd[4:])}; nothing ran")
        if code >= 128 or code < 0:  # SIGTERM or Ctrl-C stopped the sweep (checkpointed): start no other
            raise SystemExit(f"interrupted in the sweep {' '.join(cmd[4:])}; run the same command again to "
                             "continue: finished runs are reused, the interrupted one resumes")
    summaries = [finished_summary(d) for d in dirs]
    missing = [d for d, s in zip(dirs, summaries) if s is None]
    if missing:
        raise FedrunError(f"{len(missing)} of {len(jobs)} runs did not finish (their summary.json or refused.json "
                          f"says why): {', '.join(missing[:5])}{' ...' if len(missing) > 5 else ''}. Run the same "
                          "command again to retry them: finished runs are reused")
    return summaries
