"""DP-FedAvg's privacy-utility trade-off: test accuracy against epsilon for several noise multipliers.

    python scripts/figures/privacy_figure.py [--sigmas 0,0.5,1,2] [--seeds 3] [--runs DIR] [--out results/privacy]
                                             [--jobs 2]

Runs ``fedrun -m experiment=dp_mnist algo.privacy.noise_multiplier=<sigmas> seed=0..S-1`` into ``--runs`` (finished
runs are kept: run it again to resume), then plots, for each noise multiplier, the mean test accuracy over the seeds
at every evaluated round against the epsilon spent by then (the same for every seed: it depends on q, sigma, the
rounds and delta), with the band between the seeds' lowest and highest; sigma = 0 (no privacy, epsilon infinite) is
the dashed line of its mean final accuracy. Writes the figure and a README.md (final accuracy and epsilon per sigma,
and what made them) to --out.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import numpy as np


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sigmas", default="0,0.5,1,2")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--runs", type=Path, default=Path("runs/privacy"))
    parser.add_argument("--out", type=Path, default=Path("results/privacy"))
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args(argv)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import pandas as pd

    from fedrun.config.compose import compose_config
    from fedrun.papers.table_summary import provenance

    sigmas = [float(s) for s in args.sigmas.split(",")]
    subprocess.run([sys.executable, "-m", "fedrun.cli", "-m", "experiment=dp_mnist",
                    f"algo.privacy.noise_multiplier={args.sigmas}", f"seed={','.join(map(str, range(args.seeds)))}",
                    f"hydra.sweep.dir={args.runs}", "hydra.sweep.subdir=z${algo.privacy.noise_multiplier}_seed${seed}",
                    "hydra/launcher=parallel", f"hydra.launcher.n_jobs={args.jobs}", "hardware.num_threads=1",
                    "progress=false", "resume=true"], check=True)
    setting = compose_config(["experiment=dp_mnist"])
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    rows, summaries = [], []
    for sigma in sigmas:
        dirs = [args.runs / f"z{sigma}_seed{s}" for s in range(args.seeds)]
        metrics = [pd.read_csv(d / "metrics.csv") for d in dirs]
        summaries += [json.loads((d / "summary.json").read_text()) for d in dirs]
        acc = np.stack([m["test_acc"].to_numpy() for m in metrics])
        eps = metrics[0]["epsilon"].to_numpy()
        final = acc[:, -1]
        rows.append(f"| {sigma:g} | {eps[-1]:.3g} | {final.mean():.4f} (sd {final.std(ddof=1):.4f}) |")
        if np.isinf(eps[-1]):
            ax.axhline(final.mean(), linestyle="--", color="gray", label="no noise (epsilon infinite)")
            continue
        ax.plot(eps, acc.mean(axis=0), marker=".", label=f"noise multiplier {sigma:g}")
        ax.fill_between(eps, acc.min(axis=0), acc.max(axis=0), alpha=0.2)
    ax.set_xscale("log")
    ax.set_xlabel(f"epsilon (delta = {setting.algo.privacy.delta:g})")
    ax.set_ylabel("test accuracy")
    ax.set_title(f"DP-FedAvg, MNIST, {setting.model.name}, {setting.fl.num_clients} clients, q = "
                 f"{setting.participation.rate:g}, C = {setting.algo.privacy.clip:g} ({args.seeds} seeds)", fontsize=9)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    args.out.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.out / "accuracy-vs-epsilon.png", dpi=120)
    command = "python scripts/figures/privacy_figure.py " + " ".join(argv if argv is not None else sys.argv[1:])
    text = "\n".join([
        "# DP-FedAvg: test accuracy against epsilon",
        "",
        provenance(command, summaries) + f" Data: MNIST; seeds 0-{args.seeds - 1}; preset `experiment=dp_mnist` "
        f"({setting.fl.rounds} rounds, Poisson sampling at q = {setting.participation.rate:g}, RDP accountant).",
        "",
        "![accuracy against epsilon](accuracy-vs-epsilon.png)",
        "",
        "Each line: the mean test accuracy over the seeds after each round, at the epsilon spent by that round; the "
        "band, the seeds' lowest to highest.",
        "",
        f"| noise multiplier | epsilon after {setting.fl.rounds} rounds | final test accuracy |",
        "|---|---|---|",
        *rows,
        "",
    ])
    (args.out / "README.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
