"""A sweep job copies a finished run of its own config, made at the same commit, from elsewhere rather than computing
it again (``reuse=<folder>``): presets of two artefacts that share a setting (GIFT's Table 1 and its controls, DGT's
Fig. 5 and its learning-rate grid) then run it once. A twin must match on every setting that changes results, read
the same data files (``data.root``, so never a run on a fixture) and come from the same clean commit, so the copy is
the run the job would have made."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

from omegaconf import OmegaConf

from fedrun.rundir.files import (COMPLETE, CONFIG_FILE, SUMMARY_FILE, config_differences, git_commit, saved_config,
                                 write_json)

log = logging.getLogger("fedrun")


def twin(root: Path, run_dir: Path, cfg) -> Path | None:
    """A complete run under ``root`` (not ``run_dir`` itself) made at this clean commit, with the seed, the settings
    that change results and the data folder of ``cfg``; None when there is none, or when this code has uncommitted
    changes (a copy could not be told from a run of this code)."""
    commit = git_commit()
    if not commit or commit.endswith("-dirty"):
        log.info("reuse=%s: no run is copied: this code's commit is %s (a copy needs a clean one)", root,
                 "unknown" if not commit else f"{commit} (uncommitted changes)")
        return None
    if not root.is_dir():
        return None
    wanted = OmegaConf.to_container(cfg, resolve=True)
    for path in sorted(root.rglob(SUMMARY_FILE)):
        candidate = path.parent
        if candidate.resolve() == run_dir.resolve() or not (candidate / CONFIG_FILE).exists():
            continue
        summary = json.loads(path.read_text())
        if summary.get("status") not in COMPLETE or summary.get("git_commit") != commit \
                or summary.get("seed") != wanted.get("seed"):
            continue
        saved = saved_config(candidate)
        if (saved.get("data") or {}).get("root") == wanted["data"].get("root") \
                and not config_differences(saved, wanted):
            return candidate
    return None


def adopt(source: Path, run_dir: Path) -> dict:
    """Copy the run in ``source`` into ``run_dir`` (its metrics, config, checkpoints and plots; not the Hydra record
    or logs of the process that made it, which this job's own replace) and note where it came from in its summary,
    which is returned."""
    run_dir.mkdir(parents=True, exist_ok=True)
    for path in sorted(source.iterdir()):
        if path.name == ".hydra" or path.suffix == ".log":
            continue
        if path.is_dir():
            shutil.copytree(path, run_dir / path.name, dirs_exist_ok=True)
        else:
            shutil.copy2(path, run_dir / path.name)
    summary = json.loads((run_dir / SUMMARY_FILE).read_text()) | {"reused_from": str(source)}
    write_json(run_dir / SUMMARY_FILE, summary)
    return summary
