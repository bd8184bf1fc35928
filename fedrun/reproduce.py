"""What the paper-reproduction scripts share: compose a run's config from overrides, run it unless its directory
already holds a finished run, run many in parallel processes, stand a fixture in for a dataset that is missing, and
say which commits and machine made a table.

A job is ``(overrides, run_dir)``: plain strings, so it can go to a worker process (spawned, not forked, so torch's
thread pools start clean) and so a table can be re-made from its runs without re-running them.
"""

from __future__ import annotations

import atexit
import shutil
import tempfile
from concurrent.futures import ProcessPoolExecutor, as_completed
from multiprocessing import get_context
from pathlib import Path

import pandas as pd
import torch

from .compose import compose_config
from .data import DATASETS, resolve_root
from .data.fixtures import stand_in
from .results import METRICS_FILE, finished_summary
from .table_summary import provenance  # noqa: F401  (the scripts still import it from here)

Job = tuple[list[str], str]


def run_job(job: Job) -> dict:
    """Run one job (run_jobs has checked that its folder holds no finished run)."""
    overrides, run_dir = job
    from .engine.experiment import run_experiment

    return run_experiment(compose_config(overrides), run_dir)


def run_jobs(jobs: list[Job], workers: int = 1, log=print) -> list[dict]:
    """Run every job on ``workers`` processes, skipping those whose folder holds a finished run of the job's config;
    summaries come back in job order. Jobs resume: an interrupted run continues from its checkpoint, and a finished
    run with fewer rounds than the job asks for is extended. A folder holding a finished run of another config stops
    everything before any work starts (StaleRunError)."""
    jobs = [([*overrides, "resume=true"], run_dir) for overrides, run_dir in jobs]
    results: list[dict | None] = [None] * len(jobs)
    for i, (overrides, run_dir) in enumerate(jobs):
        results[i] = finished_summary(run_dir, compose_config(overrides))
    todo = [i for i, summary in enumerate(results) if summary is None]
    log(f"{len(jobs)} runs: {len(jobs) - len(todo)} already finished, {len(todo)} to run on {workers} process(es)")
    if workers <= 1:
        for n, i in enumerate(todo, 1):
            results[i] = run_job(jobs[i])
            log(_line(n, len(todo), jobs[i], results[i]))
            if results[i].get("status") == "interrupted":  # SIGTERM or Ctrl-C: stop, do not start the next job
                raise SystemExit(f"interrupted at {jobs[i][1]}; {len(todo) - n} job(s) not started. Run the same "
                                 "command again to continue: finished runs are reused, this one resumes.")
        return results
    threads = max(1, torch.get_num_threads() // workers)
    with ProcessPoolExecutor(workers, mp_context=get_context("spawn")) as pool:
        futures = {pool.submit(run_job, (jobs[i][0] + [f"hardware.num_threads={threads}"], jobs[i][1])): i
                   for i in todo}
        for n, fut in enumerate(as_completed(futures), 1):
            i = futures[fut]
            results[i] = fut.result()
            log(_line(n, len(todo), jobs[i], results[i]))
    return results


def _line(n: int, total: int, job: Job, summary: dict) -> str:
    acc = 100 * summary.get("final_test_acc", float("nan"))
    return (f"[{n}/{total}] {job[1]}: {summary.get('status')} acc {acc:.2f}% in {summary.get('wall_time_s', 0):.0f} s")


_FIXTURE_ROOTS: dict[str, tuple[Path, str, list[str]]] = {}


def fixture_for(dataset: str) -> tuple[list[str], str | None]:
    """Overrides that point ``dataset`` at a small fixture in its official format when the real data is missing, and
    the note for the table; ``([], None)`` when the real data is present."""
    if DATASETS[dataset].is_present(resolve_root(None)):
        return [], None
    if dataset not in _FIXTURE_ROOTS:
        root = Path(tempfile.mkdtemp(prefix=f"fedrun-{dataset}-fixture-"))
        atexit.register(shutil.rmtree, root, ignore_errors=True)
        extra, size = stand_in(dataset, root)
        _FIXTURE_ROOTS[dataset] = (root, size, extra)
    root, size, extra = _FIXTURE_ROOTS[dataset]
    return [f"data.root={root}", *extra], (f"not reproduced: {dataset} is not present on this machine; ran on a "
                                           f"fixture of {size}")


def mean_curve(run_dirs: list[str], column: str = "test_acc") -> pd.Series:
    """Mean over the runs (seeds) of a metrics.csv column, indexed by round. ``aggregated_<name>`` reads what the
    server aggregated: ``post_<name>`` where a harmoniser ran, else ``pre_<name>`` (the updates as sent)."""
    frames = []
    for d in run_dirs:
        metrics = pd.read_csv(Path(d) / METRICS_FILE).set_index("round")
        name = column
        if column.startswith("aggregated_"):
            base = column.removeprefix("aggregated_")
            name = f"post_{base}" if f"post_{base}" in metrics else f"pre_{base}"
        frames.append(metrics[name])
    return pd.concat(frames, axis=1).mean(axis=1)


def first_round_reaching(curve, level: float) -> int | None:
    """The first round at which ``curve`` is at least ``level``, or None."""
    hit = curve[curve >= level]
    return int(hit.index[0]) if len(hit) else None


def verdict(holds: bool) -> str:
    """How a table says whether a paper's claim held on its runs."""
    return "CONFIRMED" if holds else "NOT confirmed"
