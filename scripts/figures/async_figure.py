"""Test accuracy against simulated hours for synchronous FedAvg, FedBuff and FedAsync on the same devices.

    python scripts/figures/async_figure.py [--seeds 5] [--runs DIR] [--out results/async] [--jobs 2]

For each method it runs ``fedrun -m experiment=devices_<method>_mnist seed=0..S-1`` into ``--runs`` (finished runs
are kept: run it again to resume), reads each run's metrics.csv, puts every run's test accuracy on a common grid of
simulated time (the accuracy of the last evaluation at or before each grid point), and plots each method's mean over
the seeds with the band between their lowest and highest. It writes the figure and a README.md (the accuracies at
set times, the time each method's mean first reaches a target, the finding in words, and what made them) to --out.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import numpy as np

METHODS = {"fedavg": "synchronous FedAvg", "fedbuff": "FedBuff", "fedasync": "FedAsync"}
TARGET = 0.90  # test accuracy whose first time the table reports


def run(method: str, seeds: int, runs: Path, jobs: int) -> None:
    """The method's runs, one per seed (``resume=true``: a finished run is kept, an interrupted one continues)."""
    subprocess.run([sys.executable, "-m", "fedrun.cli", "-m", f"experiment=devices_{method}_mnist",
                    f"seed={','.join(map(str, range(seeds)))}", f"hydra.sweep.dir={runs / method}",
                    "hydra.sweep.subdir=seed${seed}", "hydra/launcher=parallel", f"hydra.launcher.n_jobs={jobs}",
                    "hardware.num_threads=1", "progress=false", "resume=true"], check=True)


def on_grid(run_dir: Path, grid: np.ndarray) -> np.ndarray:
    """The run's test accuracy at each grid time: its last evaluation at or before it (nan before the first)."""
    import pandas as pd

    rows = pd.read_csv(run_dir / "metrics.csv")
    times, acc = rows["sim_time_s"].to_numpy(), rows["test_acc"].to_numpy()
    at = np.searchsorted(times, grid, side="right") - 1
    return np.where(at >= 0, acc[np.clip(at, 0, None)], np.nan)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--runs", type=Path, default=Path("runs/devices"))
    parser.add_argument("--out", type=Path, default=Path("results/async"))
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args(argv)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from fedrun.config.compose import compose_config
    from fedrun.papers.table_summary import provenance

    setting = compose_config(["experiment=devices_fedavg_mnist"])
    budget = float(setting.timing.budget_s)
    grid = np.arange(0.0, budget + 1e-9, float(setting.eval.every_s))
    curves, summaries = {}, []
    for method in METHODS:
        run(method, args.seeds, args.runs, args.jobs)
        dirs = [args.runs / method / f"seed{s}" for s in range(args.seeds)]
        curves[method] = np.stack([on_grid(d, grid) for d in dirs])
        summaries += [json.loads((d / "summary.json").read_text()) for d in dirs]
    args.out.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    hours = grid / 3600
    for method, acc in curves.items():
        mean = np.nanmean(acc, axis=0)
        ax.plot(hours, mean, label=METHODS[method])
        ax.fill_between(hours, np.nanmin(acc, axis=0), np.nanmax(acc, axis=0), alpha=0.2)
    ax.set_xlabel("simulated hours")
    ax.set_ylabel("test accuracy")
    ax.set_title(f"MNIST, {setting.fl.num_clients} clients on lognormal devices, Markov availability "
                 f"({args.seeds} seeds)", fontsize=9)
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(args.out / "accuracy-vs-simulated-hours.png", dpi=120)
    # the first grid time at which every run has been evaluated
    early = next(i for i in range(len(grid)) if all(not np.isnan(acc[:, i]).any() for acc in curves.values()))
    marks = [t for t in (grid[early], budget / 4, budget / 2, budget) if t <= grid[-1]]
    lines = ["| method | " + " | ".join(f"accuracy at {t / 3600:.2f} h" for t in marks)
             + f" | first time the mean reaches {TARGET} |", "|---|" + "---|" * (len(marks) + 1)]
    reached = {}
    for method, acc in curves.items():
        cells = []
        for t in marks:
            at = acc[:, np.searchsorted(grid, t)]
            cells.append(f"{np.nanmean(at):.4f} (sd {np.nanstd(at, ddof=1):.4f})")
        mean = np.nanmean(acc, axis=0)
        hit = np.flatnonzero(mean >= TARGET)
        reached[method] = grid[hit[0]] / 3600 if len(hit) else None
        lines.append(f"| {METHODS[method]} | " + " | ".join(cells)
                     + f" | {'not reached' if reached[method] is None else f'{reached[method]:.2f} h'} |")
    def ranked(column: int) -> str:
        means = {m: float(np.nanmean(acc[:, column])) for m, acc in curves.items()}
        return ", ".join(f"{METHODS[m]} {means[m]:.4f}" for m in sorted(means, key=means.get, reverse=True))

    finding = (f"After the first {grid[early]:g} simulated seconds: {ranked(early)}; after {budget / 3600:g} simulated "
               f"hour(s): {ranked(-1)} (mean test accuracy over the seeds, highest first). ")
    early_mean = {m: float(np.nanmean(acc[:, early])) for m, acc in curves.items()}
    final_mean = {m: float(np.nanmean(acc[:, -1])) for m, acc in curves.items()}
    ahead_early = early_mean["fedbuff"] > early_mean["fedavg"]
    ahead_late = final_mean["fedbuff"] > final_mean["fedavg"]
    finding += ("Against FedBuff's paper (faster to a given accuracy than synchronous FedAvg): here FedBuff is "
                f"{'ahead' if ahead_early else 'behind'} early and {'ahead' if ahead_late else 'behind'} at the end. ")
    fastest = [m for m in METHODS if reached[m] is not None]
    if fastest:
        first = min(fastest, key=lambda m: reached[m])
        finding += f"The first mean to reach {TARGET} is {METHODS[first]}'s, at {reached[first]:.2f} h."
    else:
        finding += f"No method's mean reaches {TARGET} within the budget."
    command = "python scripts/figures/async_figure.py " + " ".join(argv if argv is not None else sys.argv[1:])
    text = "\n".join([
        "# Synchronous FedAvg, FedBuff and FedAsync on the same devices",
        "",
        provenance(command, summaries) + f" Data: MNIST; seeds 0-{args.seeds - 1}; presets "
        "`experiment=devices_{fedavg,fedbuff,fedasync}_mnist` (docs/simulated-clock.md).",
        "",
        "![accuracy against simulated hours](accuracy-vs-simulated-hours.png)",
        "",
        "The line is the mean over the seeds, the band their lowest to highest, each run's accuracy taken at the last "
        f"evaluation at or before each {setting.eval.every_s:g} simulated seconds.",
        "",
        *lines,
        "",
        "**Finding.** " + finding,
        "",
    ])
    (args.out / "README.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
