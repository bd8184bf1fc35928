"""The experiment driver: a run directory, its checkpoints and resume, evaluation on a grid of rounds or simulated
seconds, W&B, signals, and the summary; :class:`~fedrun.engine.run.simulation.Simulation` does the rounds."""

from __future__ import annotations

import logging
import math
import signal
import threading
import time
from pathlib import Path

import numpy as np
import torch

from fedrun.model.native import build as native
from fedrun.config.advice import selected_step_note
from fedrun.rundir.checkpoint import (check_resumable, checkpoints, config_fingerprint, earlier_work, load_latest,
                                      save_checkpoint)
from fedrun.config.checks import validate
from fedrun.errors import ConfigError
from fedrun.rundir.loggers import ProgressBar, WandbLogger
from fedrun.rundir.resume import resume_command
from fedrun.rundir.files import RunDirectory, base_summary, device_name, move_aside
from fedrun.process.startup import release_collector
from fedrun.engine.execution.ranks import Ranks
from fedrun.engine.run.simulation import Simulation

log = logging.getLogger("fedrun")


class EvaluationGrid:
    """When to evaluate: every ``every`` rounds, or with ``every_s`` at the first round whose simulated clock reaches
    each multiple of ``every_s`` seconds (a schedule with tau = 1 then is not evaluated 100 times as often per
    simulated second as one with tau = 100, which would favour it in a best-ever accuracy and cost most of its run)."""

    def __init__(self, every: int, every_s: float | None):
        self.every, self.every_s = every, every_s

    def due(self, rnd: int, clock_before: float, clock_after: float) -> bool:
        """Whether round ``rnd``, which moved the simulated clock from ``clock_before`` to ``clock_after``, is
        evaluated (a resumed run needs no state of its own: the clock is in the checkpoint)."""
        if self.every_s is None:
            return rnd % self.every == 0
        return clock_after // self.every_s > clock_before // self.every_s

    def kept(self, rnd: int, rounds: int) -> bool:
        """Whether a row of a checkpoint's history belongs to this grid (a row written only because a shorter run
        ended at ``rnd`` does not)."""
        return self.every_s is not None or rnd % self.every == 0 or rnd >= rounds


def run_experiment(cfg, run_dir: str | Path, sweep_group: str | None = None, ranks: Ranks | None = None) -> dict:
    """Run the experiment of ``cfg`` and write its files to ``run_dir``; returns the summary. With ``resume=true``
    the run continues from the newest readable checkpoint in ``run_dir`` (written every ``checkpoint.every`` rounds
    and at the last) and ends with the metrics.csv an uninterrupted run writes; with more ``fl.rounds`` than the run
    was started with, this extends a finished run; with no checkpoint to continue from, :func:`nothing_to_resume`.
    SIGTERM or Ctrl-C lets the current round finish, writes a checkpoint and ends the run with status
    ``interrupted``, saying the command that continues it; a second Ctrl-C stops at once. Over several ``ranks``
    (torchrun) each trains its share of every round and rank 0 alone writes the run's files."""
    run = validate(cfg)  # before any work (and before the run directory gets files): a bad value costs nothing
    ranks = ranks or Ranks()
    note = selected_step_note(run)
    if note:
        log.warning(note)
    run_dir = Path(run_dir)
    fingerprint = config_fingerprint(cfg)
    saved = load_latest(run_dir) if run.resume else None
    if run.resume and saved is None:
        nothing_to_resume(run_dir, run.overwrite, ranks.writer)
    started_with = check_resumable(saved, cfg, run_dir) if saved is not None else run.fl.rounds
    # the commits that computed the checkpoint's rounds and their wall time, read before summary.json is rewritten
    made_by, earlier_s, ran_on = earlier_work(saved, run_dir) if saved is not None else ([], 0.0, [])
    out = RunDirectory(run_dir, write_metrics=run.logger.name != "none", write=ranks.writer)
    summary = base_summary(cfg) | {"status": "running"}
    commits = list(dict.fromkeys(made_by + ([summary["git_commit"]] if summary["git_commit"] else [])))
    if saved is not None:
        summary["git_commits"] = commits
    out.save_summary(summary)  # first: a run killed from here on (config.yaml rewritten) never passes for finished
    out.save_config(cfg)
    started = time.perf_counter()
    wandb = None
    stop = _StopRequests()
    try:
        native.prepare(run.hardware)  # a kernel not built yet is built now, said, not in the middle of round 1
        sim = Simulation(run, ranks=ranks)
        release_collector()  # built: the rounds collect as the process did before the command started
        out.save_partition(sim.partition.to_json(sim.labels, sim.label_classes))
        log.info(sim.partition.summary(sim.labels, sim.label_classes))
        log.info("%s on %s: %s (%d parameters), %s executor, device %s", sim.algo.name, sim.data.name,
                 run.model.name, sim.model.dim, sim.executor.name, sim.device)
        summary |= {"dataset_fingerprint": sim.data.fingerprint(), "partition_fingerprint": sim.partition.fingerprint(),
                    "num_parameters": sim.model.dim, "device": str(sim.device), "machine": device_name(sim.device),
                    "executor": sim.executor.name, "ranks": ranks.size}
        machines = list(dict.fromkeys([*ran_on, summary["machine"]]))  # where its rounds ran, each once
        if saved is not None:
            summary["machines"] = machines
        if run.logger.name == "wandb" and ranks.writer:
            wandb = WandbLogger(cfg, out.path, sweep_group)
        rounds = run.fl.rounds
        grid = EvaluationGrid(run.eval.every, run.eval.every_s)
        history: list[dict] = []
        bytes_up = bytes_down = first = 0
        if saved is not None:
            sim.load_state_dict(saved["simulation"])
            bytes_up, bytes_down, first = saved["bytes_up"], saved["bytes_down"], saved["round"]
            # metrics.csv again up to the checkpoint (rows the lost run wrote later are dropped), less a row written
            # only because a shorter run ended there
            history = [row for row in saved["history"] if grid.kept(row["round"], rounds)]
            for row in history:
                out.append_metrics(row)
            summary["resumed_from_round"] = first
            if started_with < rounds:
                summary["extended_from_rounds"] = started_with
            log.info("resumed from the checkpoint of round %d in %s", first, run_dir)
        every, keep = run.checkpoint.every, run.checkpoint.keep
        bar = ProgressBar(rounds, run.progress and ranks.writer, f"{sim.algo.name}/{sim.data.name}",
                          initial=first)
        status = {"status": "finished", "rounds_completed": rounds}
        for rnd in range(first + 1, rounds + 1):
            clock = sim.state.sim_time
            step = sim.run_round(rnd)
            # a round no client joined (Poisson sampling) has no training loss; its model is still checked
            diverged = not ((not step.plans or math.isfinite(step.train_loss))
                            and bool(torch.isfinite(sim.state.params).all()))
            if step.similarity is not None and ranks.writer:  # FedGH Fig. 2, DGT Figs. 3-4
                (out.path / "similarity").mkdir(exist_ok=True)
                np.savez(out.path / "similarity" / f"round_{rnd:05d}.npz", **step.similarity)
            k = len(step.plans)
            bytes_down += step.bytes_down
            bytes_up += step.bytes_up
            budget = run.timing.budget_s
            spent = budget is not None and "sim_round_s" in step.diagnostics and sim.state.sim_time >= budget
            row = None
            if grid.due(rnd, clock, sim.state.sim_time) or rnd == rounds or diverged or spent:
                row = {"round": rnd, **sim.evaluation.evaluate(sim.state, step), "train_loss": step.train_loss,
                       "tau": float(np.mean([p.tau for p in step.plans])) if k else float("nan"), "num_clients": k,
                       "elapsed_s": round(time.perf_counter() - started, 3), "bytes_up": bytes_up,
                       "bytes_down": bytes_down}
                row |= step.diagnostics | sim.algo.report(sim.state)
                if "sim_round_s" in step.diagnostics:
                    row["sim_time_s"] = sim.state.sim_time
                if sim.evaluation.personalized:
                    row["personal_acc"] = sim.evaluation.evaluate_personalized(sim.state, rnd, sim.lr(rnd))
                history.append(row)
                out.append_metrics(row)
                if wandb:
                    wandb.log(row)
            bar.update(row)
            ended = diverged or spent
            stopping = ranks.most(stop.requested)  # a signal one rank saw stops them all after this round
            if ((every and not ended and (rnd % every == 0 or rnd == rounds)) or stopping) and ranks.writer:
                save_checkpoint(run_dir, rnd, {"round": rnd, "rounds": rounds, "config_fingerprint": fingerprint,
                                               "history": history, "bytes_up": bytes_up, "bytes_down": bytes_down,
                                               "commits": commits, "machines": machines,
                                               "wall_time_s": None if earlier_s is None else
                                               earlier_s + time.perf_counter() - started,
                                               "simulation": sim.state_dict()}, keep)
            if diverged:  # a run that fails to converge is a result (BHerd Fig. 5a, alpha = 0.1): stop, keep it
                log.warning("round %d: the training loss (%s) or the model is not finite; the run stops as diverged",
                            rnd, step.train_loss)
                status = {"status": "diverged", "rounds_completed": rnd, "diverged_round": rnd}
                break
            if spent:  # GIFT Fig. 6: a time budget ends the run like its last round would
                log.info("round %d: the simulated time budget (%.0f s) is spent; the run ends", rnd, budget)
                status = {"status": "finished", "rounds_completed": rnd, "stopped_by": "timing.budget_s"}
                break
            if stopping:
                log.warning("round %d: stopped by signal %d; checkpoint written. Continue it with:\n  %s", rnd,
                            stopping, resume_command(run_dir))
                status = {"status": "interrupted", "rounds_completed": rnd, "signal": stopping}
                break
        bar.close()
        if history:
            summary |= finish_summary(history, run.eval.target_acc)
        summary |= status | sim.executor.report()
        if ranks.size > 1:  # what exchanging the cohorts' results cost this rank (rank 0's, in summary.json)
            summary |= {"exchange": "sums" if sim.summed else "rows", "exchange_s": round(ranks.exchange_s, 3),
                        "exchange_mb": round(ranks.exchange_mb, 3)}
    except BaseException as e:
        summary |= {"status": "failed", "error": f"{type(e).__name__}: {e}"}
        raise
    finally:
        stop.restore()
        summary["wall_time_s"] = round(time.perf_counter() - started, 3)
        if saved is not None and earlier_s is not None:  # this process's time and the rounds' before it
            summary["total_wall_time_s"] = round(earlier_s + summary["wall_time_s"], 3)
        out.close()
        out.save_summary(summary)
        if wandb:
            wandb.finish(summary)
    log.info("%s: final test accuracy %.4f (best %.4f) after %d rounds, %.1f s; files in %s%s", summary["status"],
             summary.get("final_test_acc", float("nan")), summary.get("best_test_acc", float("nan")),
             summary["rounds_completed"], summary["wall_time_s"], out.path, ending_note(summary, note))
    return summary


FAR_BELOW_BEST = 0.1  # a final accuracy this far (absolute) under the run's best is a run that fell apart


def ending_note(summary: dict, note: str | None) -> str:
    """What the run's last line adds when the run diverged or ended far below its best accuracy: where it fell, and
    the start-up note's reason again where there was one (the last line is what a user reads); empty otherwise."""
    final, best = summary.get("final_test_acc"), summary.get("best_test_acc")
    if summary["status"] == "diverged":
        fell = f"; it diverged at round {summary['diverged_round']}"
    elif final is not None and best is not None and math.isfinite(final) and final < best - FAR_BELOW_BEST:
        fell = f"; it ended {best - final:.4f} below its best (round {summary['best_round']})"
    else:
        return ""
    return fell + (f". As said at the start, {note.removeprefix('note: ')}" if note else "")


def nothing_to_resume(run_dir: Path, overwrite: bool, writer: bool = True) -> None:
    """``resume=true`` where no checkpoint can be read: refused (ConfigError) where checkpoints exist but none can be
    read, unless ``overwrite=true`` (then the run's files are moved aside, by the ``writer``, and it starts over);
    said where there is none (the run starts at round 1)."""
    held = checkpoints(run_dir)
    if held and not overwrite:
        raise ConfigError([f"resume=true: none of the {len(held)} checkpoint(s) in {run_dir} can be read (each one's "
                           f"error is above), so the run cannot continue. Fix: add overwrite=true to start it over "
                           f"(its files are kept in {run_dir.name}.previous-<time>/ beside it), or put back a "
                           f"readable checkpoint_<round>.pt"])
    if held and writer:
        log.warning("resume=true overwrite=true: no checkpoint in %s can be read; the run starts over at round 1 (its "
                    "files were moved to %s)", run_dir, move_aside(run_dir))
    else:
        log.warning("resume=true: %s holds no checkpoint to continue from; the run starts at round 1", run_dir)


class _StopRequests:
    """SIGTERM (a scheduler's time limit) and Ctrl-C ask the run to stop after the current round, with a checkpoint;
    a second Ctrl-C interrupts at once. Handlers are installed only in the main thread and restored afterwards."""

    def __init__(self):
        self.requested = 0
        self._previous = {}
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGINT):
                self._previous[sig] = signal.signal(sig, self._handle)

    def _handle(self, signum, frame):
        if self.requested and signum == signal.SIGINT:
            raise KeyboardInterrupt
        self.requested = signum
        log.warning("signal %d: the run stops after this round and writes a checkpoint%s", signum,
                    " (Ctrl-C again: stop now)" if signum == signal.SIGINT else "")

    def restore(self) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)


def finish_summary(history: list[dict], target_acc: float | None) -> dict:
    final, best = history[-1], max(history, key=lambda r: r["test_acc"] if math.isfinite(r["test_acc"]) else -1)
    local = {"final_local_acc": final["local_acc"]} if "local_acc" in final else {}
    reached = [r["round"] for r in history if target_acc is not None and r["test_acc"] >= target_acc]
    return {"final_test_acc": final["test_acc"], "final_test_loss": final["test_loss"],
            "best_test_acc": best["test_acc"], "best_round": best["round"],
            "best_test_loss": min(r["test_loss"] for r in history),
            "target_acc": target_acc, "rounds_to_target": reached[0] if reached else None,
            "total_bytes_up": final["bytes_up"], "total_bytes_down": final["bytes_down"], **local}
