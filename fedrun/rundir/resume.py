"""Which run a ``resume=true`` continues, and the command that continues a run.

A run directory is Hydra's (``outputs/<date>/<time>/`` unless ``hydra.run.dir`` names one), so a command that says
``resume=true`` without ``hydra.run.dir`` would otherwise start a new run in a new folder. Here it finds the most
recent run of the same config that can go on (interrupted, killed or failed after a checkpoint, or finished with
fewer ``fl.rounds`` than asked: an extension) under the folder the run directories are made in, and runs there; when
only runs of other configs could go on, it names them and what differs, and runs nothing.
"""

from __future__ import annotations

import json
import shlex
import sys
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from omegaconf import OmegaConf

from fedrun.config.overrides import override_key
from fedrun.rundir.files import CONFIG_FILE, SUMMARY_FILE, config_differences, saved_config, saved_overrides

_OWN_KEYS = ("resume", "overwrite", "hydra.run.dir")  # the resume command sets these itself


def resume_command(run_dir: str | Path) -> str:
    """The command that continues the run in ``run_dir``: ``fedrun <its overrides> hydra.run.dir=<dir> resume=true``
    (the overrides as Hydra recorded them in ``.hydra/overrides.yaml``; a run made without them, by a script, names
    none, and resuming it with other settings is refused with the settings that differ)."""
    run_dir = Path(run_dir)
    kept = [o for o in saved_overrides(run_dir) if override_key(o) not in _OWN_KEYS]
    return shlex.join(["fedrun", *kept, f"hydra.run.dir={run_dir}", "resume=true"])


@dataclass
class Resumable:
    """A run directory whose run can go on: its status, the round of its newest checkpoint, and the settings of the
    config asked for that differ from its own (none: the same experiment)."""

    path: Path
    status: str
    round: int
    when: float
    differences: list[str] = field(default_factory=list)

    def line(self) -> str:
        more = f" and {len(self.differences) - 3} more" if len(self.differences) > 3 else ""
        differs = f" (differs: {'; '.join(self.differences[:3])}{more})" if self.differences else ""
        return (f"{self.path}: {self.status}, checkpoint of round {self.round}{differs}\n"
                f"      {resume_command(self.path)}")


def resumable_runs(root: str | Path, cfg) -> list[Resumable]:
    """Every run under ``root`` that ``resume=true`` could continue, most recent first (by its newest checkpoint),
    each with how its config differs from ``cfg``. A run can go on when it has a checkpoint and did not end
    (interrupted, killed while running, failed), or finished with fewer rounds than ``cfg`` asks. Folders that
    ``overwrite=true`` moved aside (``*.previous-<time>``) are not runs to continue."""
    from fedrun.rundir.checkpoint import checkpoints

    root = Path(root)
    if not root.is_dir():
        return []
    wanted = OmegaConf.to_container(cfg, resolve=True)
    found = []
    for summary_file in root.rglob(SUMMARY_FILE):
        run_dir = summary_file.parent
        if any(".previous-" in part for part in run_dir.relative_to(root).parts):
            continue
        held = checkpoints(run_dir)
        config_file = run_dir / CONFIG_FILE
        if not held or not config_file.exists():
            continue
        try:
            status = json.loads(summary_file.read_text()).get("status", "unknown")
            there = saved_config(run_dir)
        except (OSError, ValueError, yaml.YAMLError):
            continue
        started = (there.get("fl") or {}).get("rounds")
        if status == "diverged" or (status == "finished" and not (isinstance(started, int) and
                                                                  cfg.fl.rounds > started)):
            continue  # ended: nothing to continue
        same_rounds = wanted | {"fl": wanted["fl"] | {"rounds": started}} if isinstance(started, int) else wanted
        differences = config_differences(there, same_rounds)
        if isinstance(started, int) and cfg.fl.rounds < started:
            differences.append(f"fl.rounds: {started!r} there, {cfg.fl.rounds!r} asked")
        newest = held[0]
        found.append(Resumable(run_dir, status, int(newest.stem.split("_")[-1]), newest.stat().st_mtime, differences))
    return sorted(found, key=lambda r: r.when, reverse=True)


def run_dir_root(pattern: str) -> Path | None:
    """The folder a ``hydra.run.dir`` pattern makes run directories in (``outputs`` for ``outputs/${now:...}/...``),
    or None when the pattern names one fixed directory."""
    parts = Path(pattern).parts
    fixed = list(parts[:next((i for i, p in enumerate(parts) if "${" in p), len(parts))])
    if len(fixed) == len(parts):
        return None
    return Path(*fixed) if fixed else Path(".")


def choose_run_dir(args: list[str]) -> list[str]:
    """The command line to run: ``args`` as given, or, for a single run with ``resume=true`` and no
    ``hydra.run.dir``, with ``hydra.run.dir`` set to the most recent run of the same config that can go on (said on
    stderr). Raises ConfigError when only runs of other configs could go on (naming them and what differs), or for
    a sweep that names no ``hydra.sweep.dir`` to resume; says so when there is nothing to resume (a new run
    starts)."""
    from fedrun.config.compose import compose_config
    from fedrun.errors import ConfigError

    words = [a for a in args if "=" in a and not a.startswith("-")]
    if not any(override_key(w) == "resume" for w in words):
        return args
    sweep = bool({"-m", "--multirun"} & set(args))
    named = "hydra.sweep.dir" if sweep else "hydra.run.dir"
    if any(override_key(w) == named for w in words):
        return args
    from hydra.core.override_parser.overrides_parser import OverridesParser

    words = [o.input_line for o in OverridesParser.create().parse_overrides(words) if not o.is_sweep_override()]
    composed = compose_config(words, hydra=True)  # a sweep's grid aside: the folder and resume are the same for all
    if not composed.resume:
        return args
    pattern = OmegaConf.to_container(composed.hydra.sweep if sweep else composed.hydra.run, resolve=False)["dir"]
    root = run_dir_root(str(pattern))
    if root is None:  # the config itself names the directory
        return args
    if sweep:
        recent = sorted((p.parent for p in root.glob("**/multirun.yaml")), key=lambda p: p.stat().st_mtime,
                        reverse=True)[:3] if root.is_dir() else []
        where = f" (the most recent under {root}/: {', '.join(map(str, recent))})" if recent else ""
        raise ConfigError([f"resume=true in a sweep continues the jobs of the hydra.sweep.dir it names; without one "
                           f"this sweep would start in a new folder and resume nothing. Fix: add "
                           f"hydra.sweep.dir=<the sweep's folder>{where}"])
    runs = resumable_runs(root, compose_config(words))
    same = [r for r in runs if not r.differences]
    if same:
        chosen = same[0]
        print(f"fedrun: resume=true without hydra.run.dir: continuing the most recent run of this config that can go "
              f"on, {chosen.path} ({chosen.status}, checkpoint of round {chosen.round})"
              + (f"; {len(same) - 1} older one(s) left as they are" if len(same) > 1 else ""), file=sys.stderr)
        return [*args, f"hydra.run.dir={chosen.path}"]
    if runs:
        listed = "\n    ".join(r.line() for r in runs[:5])
        more = f"\n    and {len(runs) - 5} more" if len(runs) > 5 else ""
        raise ConfigError([f"resume=true without hydra.run.dir: no run of this config under {root}/ can go on; "
                           f"these runs of other configs can (resume one with its command, or drop resume=true to "
                           f"start a new run):\n    {listed}{more}"])
    print(f"fedrun: resume=true: nothing to resume under {root}/ (no run with a checkpoint that can go on); starting "
          f"a new run at round 1", file=sys.stderr)
    return args
