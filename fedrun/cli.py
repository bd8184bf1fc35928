"""The ``fedrun`` command: Hydra composes the config from ``conf/``, and one run goes to Hydra's run directory.

In a sweep (``--multirun``) each job is one run directory: a job whose directory already holds a complete run
(``summary.json`` finished or diverged) is skipped, so a resubmitted sweep (same ``hydra.sweep.dir``) runs only
what is missing; a job that fails is recorded (``summary.json`` with status failed and the error) and the sweep goes
on, and so does a job refused because its directory holds a finished run of another config (``refused.json`` beside
that run, which stays); the command exits with status 1 at the end when any job failed or was refused. A run stopped
by SIGTERM or Ctrl-C writes a checkpoint and exits with 128 + the signal's number; ``resume=true`` with the same run
directory continues it, and with more ``fl.rounds`` extends a finished run (a sweep's finished jobs too).
"""

from __future__ import annotations

import json
import logging
import os
import re
import shlex
import sys
import traceback
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf, open_dict

from fedrun.config.compose import CONF_DIR
from fedrun.errors import ConfigError, FedrunError, OverwriteError, StaleRunError
from fedrun.papers import CONFIRMATORY_FROM
from fedrun.config.overrides import check_overrides, check_run, check_sweep_jobs, override_key
from fedrun.config.renames import renamed_overrides
from fedrun.process.quick_exit import ends_process
from fedrun.rundir.resume import choose_run_dir
from fedrun.rundir.files import (CONFIG_FILE, REFUSED_FILE, SUMMARY_FILE, base_summary, finished_summary, move_aside,
                                 unwritable_folder, write_json)
from fedrun.process.startup import hold_collector
from fedrun.rundir.reuse import adopt, twin
from fedrun.rundir.sweeps import FAILED_JOBS

log = logging.getLogger("fedrun")


@hydra.main(version_base="1.3", config_path=CONF_DIR, config_name="config")
def _main(cfg: DictConfig) -> float | None:
    from fedrun.engine.run.experiment import run_experiment  # torch and the engine: not for --help or a refused one
    from fedrun.engine.execution.ranks import start

    hold_collector()  # a sweep's next job starts again
    hc = HydraConfig.get()
    run_dir = Path(hc.runtime.output_dir)
    if hc.mode != RunMode.MULTIRUN:
        writer = True  # a refusal before the ranks have met is said by each (torchrun may stop the others first)
        try:
            ranks = start(cfg)  # torchrun's ranks (one process: the one rank)
            writer = ranks.writer
            if ranks.size > 1:
                run_dir = ranks.from_writer(run_dir)  # the folder rank 0's clock named
            ranks.on_writer(lambda: keep_earlier_run(run_dir, cfg))
            summary = run_experiment(cfg, run_dir, ranks=ranks)
        except FedrunError as e:
            if writer:
                print(f"fedrun: {e}", file=sys.stderr)
            sys.exit(2)
        if summary["status"] == "interrupted":  # checkpointed: `fedrun ... hydra.run.dir=<dir> resume=true` goes on
            sys.exit(128 + int(summary["signal"]))
        return summary.get("final_test_acc")
    ranks = start(cfg)  # a launcher's job over several tasks (hydra.launcher.tasks_per_node): its ranks
    refused = run_dir / REFUSED_FILE
    try:
        done = finished_summary(run_dir, cfg)
    except StaleRunError as e:  # the run is left as it is, the refusal noted beside it; the sweep goes on
        if ranks.writer:
            write_json(refused, {"status": "refused", "error": str(e)})
            log.error("job %s: %s", hc.job.num, e)
        return None
    if ranks.writer:
        refused.unlink(missing_ok=True)  # an earlier refusal no longer applies
    if done is not None:
        log.info("job %s: %s already holds a %s run; skipped", hc.job.num, run_dir, done["status"])
        return done.get("final_test_acc")
    source = twin(Path(cfg.reuse), run_dir, cfg) if cfg.reuse else None
    if source is not None:
        done = adopt(source, run_dir) if ranks.writer else {}
        log.info("job %s: %s holds a %s run of this config, made at this commit: copied into %s, not run again",
                 hc.job.num, source, done.get("status", "finished"), run_dir)
        return done.get("final_test_acc")
    summary_file = run_dir / SUMMARY_FILE
    earlier = summary_file.stat().st_mtime_ns if summary_file.exists() else None  # an earlier attempt's
    try:
        summary = run_experiment(cfg, run_dir, sweep_group=Path(hc.sweep.dir).name, ranks=ranks)
    except KeyboardInterrupt:
        raise
    except Exception as e:  # one bad job must not end the sweep
        if not ranks.writer:
            return None
        stamp = summary_file.stat().st_mtime_ns if summary_file.exists() else None
        if stamp == earlier:  # refused before it started (a bad value at this grid point): say so now
            (run_dir / CONFIG_FILE).write_text(resolved_yaml(cfg))
            write_json(run_dir / SUMMARY_FILE, base_summary(cfg) | {"status": "failed",
                                                                    "error": f"{type(e).__name__}: {e}"})
        log.error("job %s failed (%s: %s); recorded in %s, the sweep goes on", hc.job.num, type(e).__name__, e,
                  run_dir / SUMMARY_FILE)
        log.debug("%s", traceback.format_exc())
        return None
    if summary["status"] == "interrupted":  # Ctrl-C / SIGTERM stops the sweep, not just this job
        again = [a for a in sys.argv[1:] if override_key(a) not in ("resume", "hydra.sweep.dir")]
        log.warning("sweep stopped at job %s (checkpointed); continue it with:\n  %s", hc.job.num,
                    shlex.join(["fedrun", *again, f"hydra.sweep.dir={hc.sweep.dir}", "resume=true"]))
        sys.exit(128 + int(summary["signal"]))
    return summary.get("final_test_acc")


def resolved_yaml(cfg) -> str:
    """The config as a run directory records it: resolved, so that reports compare values, not interpolations (the
    unresolved text only when an interpolation itself is what failed)."""
    try:
        return OmegaConf.to_yaml(cfg, resolve=True)
    except Exception:  # noqa: BLE001
        return OmegaConf.to_yaml(cfg)


def keep_earlier_run(run_dir: Path, cfg) -> None:
    """A single run never replaces a run its directory already holds without being told to. A finished, diverged,
    interrupted or killed run (status running), or any run with checkpoints, is refused (OverwriteError, exit 2)
    unless ``resume=true`` (continue or extend it) or ``overwrite=true`` (start over: the earlier files move to a
    sibling folder ``<dir>.previous-<time>``, never deleted). A failed run without checkpoints is moved aside the
    same way and the new run starts, and so is a run that ``resume=true`` cannot continue because it wrote no
    checkpoint (killed before its first)."""
    from fedrun.rundir.checkpoint import checkpoints

    summary_file = run_dir / SUMMARY_FILE
    summary = json.loads(summary_file.read_text()) if summary_file.exists() else None
    held = checkpoints(run_dir)
    if summary is None and not held:
        return
    status = (summary or {}).get("status", "unknown")
    if cfg.resume:
        if held:
            return  # continued (or, when none of its checkpoints can be read, refused) by run_experiment
        aside = move_aside(run_dir)
        log.warning("resume=true: the %s run in %s wrote no checkpoint to continue from (checkpoint.every=%s), so "
                    "the run starts over at round 1; its files were moved to %s", status, run_dir,
                    cfg.checkpoint.every, aside)
        return
    if not cfg.overwrite and (held or status != "failed"):
        what = {"running": "a run that was killed (status running)", "interrupted": "an interrupted run"}.get(
            status, f"a {status} run")
        saved = f" with checkpoints up to round {int(held[0].stem.removeprefix('checkpoint_'))}" if held else ""
        raise OverwriteError(f"{run_dir} holds {what}{saved}. Add resume=true to continue it (with more fl.rounds, "
                             f"to extend it), or overwrite=true to start over (its files are kept in "
                             f"{run_dir.name}.previous-<time>/ beside it), or choose another hydra.run.dir")
    aside = move_aside(run_dir)
    log.warning("the earlier %s run in %s was moved to %s", status, run_dir, aside)


def app_help(args: list[str]) -> str:
    """``fedrun --help``: Hydra's help with the groups' options as ``conf/`` has them (Hydra's own listing would also
    show the parts' schemas, which ConfigStore holds beside the options: ``SGDConfig``...)."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from fedrun.config.overrides import group_options

    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
            cfg = compose("config", overrides=[a for a in args if "=" in a and not a.startswith("-")],
                          return_hydra_config=True)
    finally:
        GlobalHydra.instance().clear()
    text = cfg.hydra.help
    groups = "\n".join(f"{group}: {', '.join(options)}" for group, options in group_options(CONF_DIR).items())
    with open_dict(cfg):
        del cfg["hydra"]
    return (f"{text.header}\n== Configuration groups ==\nCompose your configuration from those groups (group=option)"
            f"\n\n{groups}\n\n\n== Config ==\nOverride anything in the config (foo.bar=value)\n\n"
            f"{OmegaConf.to_yaml(cfg)}\n{text.footer}\nPowered by Hydra (https://hydra.cc)\n"
            "Use --hydra-help to view Hydra specific help")


def run_folder(args: list[str]) -> tuple[str, str]:
    """The key and value of the folder a command writes its run (or sweep) to: the last ``hydra.run.dir`` (with
    ``--multirun``, ``hydra.sweep.dir``) it gives, else the folder conf/config.yaml's default lies in."""
    key = "hydra.sweep.dir" if {"-m", "--multirun"} & set(args) else "hydra.run.dir"
    given = [a.split("=", 1)[1] for a in args if override_key(a) == key]
    value = given[-1] if given else {"hydra.run.dir": "outputs", "hydra.sweep.dir": "multirun"}[key]
    return key, value.split("${", 1)[0] or "."  # an interpolated name: the folder it lies in


def missing_scheduler(args: list[str]) -> str | None:
    """``hydra/launcher=slurm`` where SLURM is not installed (no ``sbatch``): said in one line, before submitit's
    traceback would."""
    import shutil

    submits = bool({"-m", "--multirun"} & set(args)) and "--cfg" not in args  # --cfg hydra only prints it
    if not submits or "hydra/launcher=slurm" not in args or shutil.which("sbatch"):
        return None
    return ("hydra/launcher=slurm: SLURM is not on this machine (no sbatch on the PATH). Fix: run the command on a "
            "SLURM login node, or hydra/launcher=slurm_local to run the same jobs here as local processes")


def printed_resolved(args: list[str]) -> list[str]:
    """``--cfg job`` (``-c job``) prints the config's values, as the run records them in config.yaml, not its
    interpolations (``fl.reshuffle: ${algo.step_selector.reshuffle}``): Hydra's ``--resolve`` added where not given.
    Not for ``--cfg hydra`` or ``all``, whose run-time values (the output folder) exist only in a run."""
    asked = [args[i + 1] for i, a in enumerate(args[:-1]) if a in ("--cfg", "-c")]
    return [*args, "--resolve"] if asked == ["job"] and "--resolve" not in args else args


def confirmatory_block(args: list[str]) -> str | None:
    """A paper's preset asked to run on the claims' confirmatory seeds outside ``fedrun-table --confirm``: refused
    (fedrun.papers.artefacts.confirmatory_block_refused); the papers are read only when a seed of the block is
    named."""
    named = [int(n) for a in args if override_key(a) == "seed" for n in re.findall(r"\d+", a.split("=", 1)[-1])]
    if not any(n >= CONFIRMATORY_FROM for n in named):  # none of the block named: the papers (pandas) stay unloaded
        return None
    from fedrun.papers.artefacts import confirmatory_block_refused

    return confirmatory_block_refused([a for a in args if "=" in a and not a.startswith("-")])


def main() -> None:
    hold_collector()  # until the run is built (fedrun/process/startup.py)
    sys.argv[1:], notes = renamed_overrides(sys.argv[1:])  # a renamed key typed in its old spelling
    sys.argv[1:] = printed_resolved(sys.argv[1:])
    for note in notes:
        print(f"fedrun: note: {note}", file=sys.stderr)
    if {"--help", "-h"} & set(sys.argv[1:]):
        print(app_help(sys.argv[1:]))
        return
    problems = check_overrides(sys.argv[1:], CONF_DIR)
    if int(os.environ.get("WORLD_SIZE", "1")) > 1 and {"-m", "--multirun"} & set(sys.argv[1:]):  # under torchrun
        problems = ["--multirun under torchrun: each of a sweep's jobs would need every rank at once. Fix: one "
                    "torchrun per run (a sweep's launcher can start them), or drop torchrun for a sweep of "
                    "one-process runs"]
    sweep = bool({"-m", "--multirun"} & set(sys.argv[1:]))
    if not problems:  # every job's values (a sweep's, or the one run's), before Hydra makes a folder
        problems = (check_sweep_jobs if sweep else check_run)(sys.argv[1:], CONF_DIR)
    if not problems:
        try:
            sys.argv[1:] = choose_run_dir(sys.argv[1:])  # resume=true without a directory: the run it continues
        except ConfigError as e:
            problems = e.problems
    problems += [p for p in [unwritable_folder(*run_folder(sys.argv[1:])), missing_scheduler(sys.argv[1:]),
                             confirmatory_block(sys.argv[1:])] if p]
    if problems:
        print("fedrun: " + str(ConfigError(problems)), file=sys.stderr)
        sys.exit(2)
    _main()
    if FAILED_JOBS:
        print(f"fedrun: {len(FAILED_JOBS)} job(s) failed: {', '.join(FAILED_JOBS)} (see their summary.json, or "
              f"refused.json for a folder holding a run of another config; `fedrun-report` lists failed runs)",
              file=sys.stderr)
        sys.exit(1)


command = ends_process(main)  # the console script: main, then the process ends without Python's teardown


if __name__ == "__main__":
    command()
