"""Checkpoints: a run's full state at the end of a round, so that a run killed at round 950 continues from there.

Each checkpoint is ``checkpoint_<round>.pt`` in the run directory, written to a temporary file and renamed into
place (a crash mid-write never leaves a half-written checkpoint under the real name), the newest ``keep`` kept. It
holds only tensors, numbers, strings and containers of them and is read with ``torch.load(weights_only=True)``, so
loading one never executes code. A checkpoint that cannot be read (truncated, corrupted) is skipped with a warning
and the one before it is used.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from pathlib import Path

import torch
from omegaconf import OmegaConf

from fedrun.errors import ConfigError
from fedrun.rundir.files import (CONFIG_FILE, EXECUTION_SETTINGS, changes_results, commits_of, config_differences,
                                 machines_of, saved_config)

log = logging.getLogger("fedrun")
PREFIX = "checkpoint_"
# keys that may differ between a run and its resumption: how it runs, not what it computes (the top-level
# EXECUTION_SETTINGS less the settings among them that change results; data.root stays in the hash, so that
# checkpoints already written keep their fingerprints)
_NOT_COMPARED = tuple(key for key in EXECUTION_SETTINGS if "." not in key)


def config_fingerprint(cfg, rounds: int | None = None) -> str:
    """Hash of the resolved config without the keys a resumed run may change (resume, progress, checkpoint,
    logger, the hardware settings that do not change results); with ``rounds``, hashed as if ``fl.rounds`` were
    ``rounds``."""
    plain = OmegaConf.to_container(cfg, resolve=True)
    for key in _NOT_COMPARED:
        section = plain.pop(key, None)
        kept = {k: v for k, v in section.items() if changes_results(f"{key}.{k}")} if isinstance(section, dict) else {}
        if kept:
            plain[key] = kept
    if rounds is not None:
        plain["fl"]["rounds"] = rounds
    return hashlib.sha256(json.dumps(plain, sort_keys=True, default=str).encode()).hexdigest()[:16]


def check_resumable(saved: dict, cfg, run_dir: Path) -> int:
    """The number of rounds the checkpointed run was started with, after refusing (ConfigError) a checkpoint of
    another experiment or one past ``fl.rounds``. A checkpoint of the same experiment started with fewer rounds is
    accepted: resuming it with more rounds extends the run, since nothing a round computes depends on the total.
    Checkpoints written before they recorded ``rounds`` take it from the run's config.yaml."""
    started = saved.get("rounds")
    config = run_dir / CONFIG_FILE
    if started is None:
        started = saved_config(run_dir).get("fl", {}).get("rounds")
    started = int(started if started is not None else cfg.fl.rounds)
    if saved["config_fingerprint"] != config_fingerprint(cfg, rounds=started):
        differences = changed_settings(config, cfg, started)
        if differences or differences is None:
            named = (f": {'; '.join(differences[:5])}" + (f" and {len(differences) - 5} more" if len(differences) > 5
                                                            else "")) if differences else ""
            raise ConfigError([f"resume=true: the checkpoint in {run_dir} is of a different experiment{named}. "
                               f"Fix: resume with the settings the run was started with (see {config}; only "
                               f"fl.rounds may grow), or start it in a new directory"])
        log.info("resume: the run was made before some of today's settings existed; none it holds has changed")
    if saved["round"] > cfg.fl.rounds:
        raise ConfigError([f"resume=true: the checkpoint in {run_dir} is of round {saved['round']}, past "
                           f"fl.rounds={cfg.fl.rounds}. Fix: fl.rounds={started} (as the run was started), or start "
                           f"it in a new directory"])
    return started


def changed_settings(config: Path, cfg, started: int) -> list[str] | None:
    """The settings of the run's config.yaml that ``cfg`` changes (fl.rounds taken as ``started``), named as
    ``key: value there, value asked``; None when the run has no config.yaml to compare with. Settings only one of
    them holds (added to fedrun after the run was made) and execution settings do not count."""
    if not config.exists():
        return None
    wanted = OmegaConf.to_container(cfg, resolve=True)
    wanted["fl"] = wanted["fl"] | {"rounds": started}
    there = saved_config(config.parent)
    if isinstance(there.get("fl"), dict):
        there["fl"] = there["fl"] | {"rounds": started}
    return config_differences(there, wanted)


def earlier_work(saved: dict, run_dir: Path) -> tuple[list[str], float | None, list[str]]:
    """The commits that computed a checkpoint's rounds, in order, their wall time in seconds (None when not known) and
    the machines they ran on, so that a resumed or extended run's summary names every commit and machine that made it.
    Checkpoints written before they recorded these take them from the run's summary.json (the run that wrote the
    checkpoint)."""
    summary = run_dir / "summary.json"
    old = json.loads(summary.read_text()) if summary.exists() else {}
    if "commits" in saved:
        return list(saved["commits"]), saved.get("wall_time_s"), list(saved.get("machines", machines_of(old)))
    return commits_of(old), None, machines_of(old)


def checkpoints(run_dir: str | os.PathLike) -> list[Path]:
    """The run's checkpoints, newest first."""
    return sorted(Path(run_dir).glob(f"{PREFIX}*.pt"), reverse=True)


def save_checkpoint(run_dir: str | os.PathLike, rnd: int, state: dict, keep: int = 2) -> Path:
    """Write ``state`` as the checkpoint of round ``rnd`` atomically; keep the newest ``keep`` checkpoints."""
    path = Path(run_dir) / f"{PREFIX}{rnd:07d}.pt"
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        torch.save(state, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    for old in checkpoints(run_dir)[keep:]:
        old.unlink(missing_ok=True)
    return path


def load_latest(run_dir: str | os.PathLike) -> dict | None:
    """The newest readable checkpoint of the run (tensors on the CPU), or None when there is none."""
    for path in checkpoints(run_dir):
        try:
            return torch.load(path, map_location="cpu", weights_only=True)
        except Exception as e:  # truncated or corrupted: fall back to the previous one
            log.warning("checkpoint %s cannot be read (%s: %s); trying the one before it", path, type(e).__name__, e)
    return None
