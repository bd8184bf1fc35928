"""A run directory's files: config.yaml, partition.json, metrics.csv (row by row, flushed) and summary.json.

Rows are flushed as they are written, so a run that fails keeps every row it wrote; summary.json records the
status (finished or failed, with the error)."""

from __future__ import annotations

import csv
import json
import os
import subprocess
from pathlib import Path

import yaml
from omegaconf import OmegaConf

from fedrun import __version__
from fedrun.config.renames import renamed_override, upgraded
from fedrun.errors import StaleRunError

METRICS_FILE, SUMMARY_FILE, CONFIG_FILE, PARTITION_FILE = "metrics.csv", "summary.json", "config.yaml", "partition.json"
OVERRIDES_FILE = Path(".hydra") / "overrides.yaml"  # Hydra's record of a run's command-line overrides
REFUSED_FILE = "refused.json"  # a sweep job refused to reuse this folder's run of another config: why (the run stays)
BASE_COLUMNS = ["round", "test_acc", "test_loss", "train_loss", "tau", "num_clients", "elapsed_s", "bytes_up",
                "bytes_down"]


def commits_of(summary: dict) -> list[str]:
    """The commits that computed a run's rounds, as its summary.json records them (a resumed run: every one, in
    order; an older summary: its one ``git_commit``)."""
    return [str(c) for c in summary.get("git_commits") or [summary.get("git_commit")] if c]


def machines_of(summary: dict) -> list[str]:
    """The machines that computed a run's rounds, as its summary.json records them (a resumed run: every one, in
    order); [] for a run made before runs recorded theirs."""
    return [str(m) for m in summary.get("machines") or [summary.get("machine")] if m]


def device_name(device) -> str:
    """The machine a ``torch.device`` names, as results cite it: the GPU's model, or the CPU's with the threads torch
    uses (what a CPU run's speed depends on)."""
    import torch

    if torch.device(device).type == "cuda":
        return torch.cuda.get_device_name(device)
    threads = torch.get_num_threads()
    return f"{cpu_model()} ({threads} thread{'s' * (threads != 1)})"


def cpu_model() -> str:
    """This machine's CPU model as /proc/cpuinfo names it (the platform's processor string elsewhere)."""
    import platform

    model = platform.processor() or "cpu"
    try:
        with open("/proc/cpuinfo") as f:
            model = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return model


def git_commit(tree: Path | None = None) -> str | None:
    """The commit of a fedrun source tree (this one by default), with ``-dirty`` when its code has uncommitted
    changes; changes under ``results/`` do not count (a bench run rewrites its tables there before the next one
    records its commit). A tree copied without its git folder (to a cluster's or a GPU machine's disk), or fedrun
    installed from a wheel, has none to read: there ``$FEDRUN_COMMIT``, the commit its sender names, else None."""
    src = tree or Path(__file__).resolve().parents[2]
    named = None if tree else os.environ.get("FEDRUN_COMMIT") or None
    if not (src / ".git").exists():  # an installed wheel (site-packages may lie in another project's repository)
        return named
    try:
        proc = subprocess.run(["git", "-C", str(src), "rev-parse", "--verify", "-q", "HEAD"], capture_output=True,
                              text=True, timeout=10)
        sha = proc.stdout.strip()
        if proc.returncode != 0 or not sha:
            return named
        dirty = subprocess.run(["git", "-C", str(src), "status", "--porcelain", "--untracked-files=no", "--", ".",
                                ":(exclude)results"], capture_output=True, text=True, timeout=10).stdout.strip()
        return sha + ("-dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return named


def write_json(path: Path, obj) -> None:
    """Write via a temporary file and rename, so a reader never sees half a file."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(obj, indent=2, default=float) + "\n")
    os.replace(tmp, path)


class RunDirectory:
    """The files of a run; with ``write=False`` (a run's ranks other than 0) none is written."""

    def __init__(self, path: str | os.PathLike, write_metrics: bool = True, write: bool = True):
        self.path = Path(path)
        if write:
            self.path.mkdir(parents=True, exist_ok=True)
        self.write, self.write_metrics = write, write_metrics and write
        self._file = None
        self._writer = None
        self._rows: list[dict] = []
        self.columns: list[str] | None = None

    def save_config(self, cfg) -> None:
        if self.write:
            (self.path / CONFIG_FILE).write_text(OmegaConf.to_yaml(cfg, resolve=True))

    def save_partition(self, info: dict) -> None:
        if self.write:
            write_json(self.path / PARTITION_FILE, info)

    def append_metrics(self, row: dict) -> None:
        """One row of metrics.csv. A row with columns the file lacks (a model bank's columns from its first round
        on) rewrites the file with the wider header; earlier rows leave those cells empty."""
        if not self.write_metrics:
            return
        self._rows.append(row)
        new = [k for k in row if k not in (self.columns or BASE_COLUMNS)]
        if self._writer is None or new:
            self.close()
            self.columns = (self.columns or BASE_COLUMNS) + new
            self._file = open(self.path / METRICS_FILE, "w", newline="")
            self._writer = csv.DictWriter(self._file, fieldnames=self.columns, extrasaction="ignore")
            self._writer.writeheader()
            rows = self._rows
        else:
            rows = [row]
        for r in rows:
            self._writer.writerow({k: _fmt(r.get(k)) for k in self.columns})
        self._file.flush()

    def save_summary(self, summary: dict) -> None:
        if self.write:
            write_json(self.path / SUMMARY_FILE, summary)

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
            self._writer = None


def _fmt(v):
    if isinstance(v, float):
        return repr(v)  # shortest exact repr: rows compare equal across identical runs
    return v


COMPLETE = ("finished", "diverged")  # a run's outcome: deterministic, what means are over and what is not rerun

# How a run executes or is logged, and where its data files are: not what it computes...
EXECUTION_SETTINGS = ("hardware", "progress", "checkpoint", "resume", "overwrite", "reuse", "logger", "data.root")
# ...but for these hardware settings, which change the numbers a run computes (float64; TF32's or bfloat16's
# products; the order of a GPU's sums): a run made with another of them is another run
RESULT_SETTINGS = ("hardware.dtype", "hardware.precision", "hardware.deterministic")


def changes_results(key: str) -> bool:
    """Whether a setting (a dotted key, or a section holding settings) can change what a run computes: everything but
    EXECUTION_SETTINGS, and RESULT_SETTINGS among them. The one list that the staleness check, resuming and
    fedrun-report's grouping share."""
    if any(r == key or r.startswith(key + ".") for r in RESULT_SETTINGS):
        return True
    return not any(key == s or key.startswith(s + ".") for s in EXECUTION_SETTINGS)


def saved_config(run_dir: str | Path) -> dict:
    """The config a run saved (its ``config.yaml``, a plain dict; empty when it has none) in today's keys
    (:func:`fedrun.config.renames.upgraded`): how every reader of a run's settings reads them."""
    path = Path(run_dir) / CONFIG_FILE
    return upgraded(yaml.safe_load(path.read_text()) or {}) if path.exists() else {}


def saved_overrides(run_dir: str | Path) -> list[str]:
    """The command-line overrides Hydra recorded for the run (``.hydra/overrides.yaml``; none for a run a script
    made), in today's spelling."""
    path = Path(run_dir) / OVERRIDES_FILE
    return [renamed_override(str(o)) for o in (yaml.safe_load(path.read_text()) or [])] if path.exists() else []


def overridden(run_dir: str | Path) -> dict[str, str]:
    """The value each of the run's recorded overrides (:func:`saved_overrides`) sets, by its key."""
    from fedrun.config.overrides import override_key

    return {override_key(o): o.split("=", 1)[1] for o in saved_overrides(run_dir) if "=" in o}


def config_differences(saved: dict, wanted: dict, prefix: str = "") -> list[str]:
    """The settings both configs (plain dicts) hold with different values, as ``key: saved there, wanted asked``.
    A setting only one of them holds (added to fedrun after a run was made) is not compared, nor are those that do
    not change results (:func:`changes_results`). A saved config is compared as :func:`saved_config` reads it."""
    out = []
    for key in sorted(saved.keys() & wanted.keys(), key=str):
        name = f"{prefix}{key}"
        if not changes_results(name):
            continue
        a, b = saved[key], wanted[key]
        if isinstance(a, dict) and isinstance(b, dict):
            out += config_differences(a, b, name + ".")
        elif a != b:
            out.append(f"{name}: {a!r} there, {b!r} asked")
    return out


def finished_summary(run_dir: str | Path, cfg=None) -> dict | None:
    """The run's summary if it is complete (finished, or diverged: a deterministic outcome), else None (missing,
    failed or interrupted runs are run again).

    With ``cfg`` (the config the caller would run there), a complete run whose saved config differs from it on a
    setting that changes what is computed (say a folder reused with another seed) raises StaleRunError rather than
    passing for the run asked for. More ``fl.rounds`` than the run had is the one difference that is not stale: a
    diverged run is complete for any number of rounds, and a finished one is None with ``resume=true`` (running it
    extends it from its last checkpoint)."""
    path = Path(run_dir) / SUMMARY_FILE
    if not path.exists():
        return None
    summary = json.loads(path.read_text())
    if summary.get("status") not in COMPLETE:
        return None
    if cfg is None or not (Path(run_dir) / CONFIG_FILE).exists():
        return summary
    config, wanted = saved_config(run_dir), OmegaConf.to_container(cfg, resolve=True)
    differences = config_differences(config, wanted)
    started = config.get("fl", {}).get("rounds")
    longer = isinstance(started, int) and cfg.fl.rounds > started and not config_differences(
        config, wanted | {"fl": wanted["fl"] | {"rounds": started}})
    if longer and summary["status"] == "diverged":
        return summary
    if longer and cfg.resume:
        return None
    if differences:
        more = f" and {len(differences) - 3} more" if len(differences) > 3 else ""
        extend = " To extend it to the rounds asked, add resume=true." if longer else ""
        raise StaleRunError(f"{run_dir} holds a finished run of another config ({'; '.join(differences[:3])}"
                            f"{more}), which would pass for the one asked for.{extend} Otherwise write these runs to "
                            f"another folder (a script's --runs, or hydra.sweep.dir) or delete that one.")
    return summary


def unwritable_folder(key: str, value: str) -> str | None:
    """The problem of ``key=value`` as a folder a run writes to, or None: tried for real (the folders it lacks made,
    a file written, then both removed), since permission bits do not tell it for root, /proc or /sys."""
    path = Path(value).absolute()
    missing, existing = [], path
    while not existing.exists() and existing != existing.parent:
        missing.append(existing)
        existing = existing.parent
    fix = f"Fix: {key}=<a folder you can write>, e.g. {key}=outputs/my-run"
    if not existing.is_dir():
        return f"{key}={value}: {existing} is a file, so no folder can be made under it. {fix}"
    made = []
    try:
        for folder in reversed(missing):
            folder.mkdir()
            made.append(folder)
        probe = path / f".fedrun-write-probe-{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as e:
        where = Path(e.filename) if e.filename else path
        return f"{key}={value}: {where} cannot be written ({e.strerror or e}). {fix}"
    finally:
        for folder in reversed(made):
            folder.rmdir()
    return None


def move_aside(run_dir: Path) -> Path:
    """Move the files of the run in ``run_dir`` to a sibling folder ``<dir>.previous-<time>`` (never deleted), so that
    a new run starts there; Hydra's own files of this invocation stay. Returns the folder they went to."""
    import shutil
    import time

    aside = run_dir.with_name(f"{run_dir.name}.previous-{time.strftime('%Y%m%d-%H%M%S')}")
    aside.mkdir()
    for path in sorted(run_dir.iterdir()):
        if path.name in (".hydra",) or path.suffix == ".log":
            continue
        shutil.move(str(path), aside / path.name)
    return aside


def base_summary(cfg) -> dict:
    from fedrun.algorithms import method_name

    return {"fedrun_version": __version__, "git_commit": git_commit(), "seed": int(cfg.seed),
            "algo": cfg.algo.name, "method": method_name(cfg.algo), "data": cfg.data.name, "model": cfg.model.name}
