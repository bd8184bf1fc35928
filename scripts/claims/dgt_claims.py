"""DGT's size against its learning rate, and against a step-length control (issue #23).

    python scripts/claims/dgt_claims.py [--datasets mnist,fashion_mnist] [--bases fedavg,scaffold] [--lrs 0.01,0.05,0.1]
                                 [--rounds T] [--targets DATASET=ACC,...] [--seeds K] [--workers P] [--runs DIR]
                                 [--out DIR] [hydra overrides for every job: a launcher...]

``experiment=dgt_<dataset>`` (20 clients holding two classes each, all taking part, the three-layer CNN, B = 256,
E = 1) for each base at each learning rate (the paper gives none) in three variants: the base alone, the base with
DGT, and the control ``algo.harmonizer.mode=norm_only``: the base's own updates scaled each round by the ratio of
DGT's aggregate length to the plain aggregate's (``dgt_norm_ratio``), so that "DGT's direction helps" is told apart
from "a longer server step helps". Writes <out>/exploration.md: final accuracy and the mean of the last 5 rounds, the
rounds to each dataset's target (the paper's "x times faster" counts them), the mean norm ratio, and the verdicts;
and <out>/claims_lr.png, the accuracy curves of seed 0.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from fedrun.papers import job_lists as batch
from fedrun.papers.table_summary import provenance

VARIANTS = {"base": ["algo/harmonizer=none"], "DGT": ["algo/harmonizer=dgt"],
            "control": ["algo/harmonizer=dgt", "algo.harmonizer.mode=norm_only"]}
MARGIN = 0.5  # accuracy points


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--datasets", default="mnist")
    parser.add_argument("--bases", default="fedavg")
    parser.add_argument("--lrs", default="0.01,0.05,0.1")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--targets", default="mnist=0.9,fashion_mnist=0.75")
    parser.add_argument("--seeds", type=int, default=1)
    parser.add_argument("--runs", default="outputs/dgt_claims")
    parser.add_argument("--out", default="results/dgt")
    batch.add_arguments(parser)
    args = parser.parse_args(argv)
    targets = {k: float(v) for k, v in (t.split("=") for t in args.targets.split(","))}
    jobs, keys = [], []
    for dataset in args.datasets.split(","):
        for base in args.bases.split(","):
            for lr in args.lrs.split(","):
                for variant, overrides in VARIANTS.items():
                    for seed in range(args.seeds):
                        keys.append((dataset, base, float(lr), variant, seed))
                        jobs.append([f"experiment=dgt_{dataset}", f"algo={base}", *overrides, f"fl.lr={lr}",
                                     f"fl.rounds={args.rounds}", f"seed={seed}"])
    summaries = batch.run(jobs, args.runs, batch.every_job(args))
    command = "python scripts/claims/dgt_claims.py " + " ".join(argv if argv is not None else sys.argv[1:])
    frames = {k: pd.read_csv(Path(batch.job_dir(job, args.runs)) / "metrics.csv").set_index("round")
              for k, job in zip(keys, jobs)}
    diverged_at = {k: s.get("diverged_round") for k, s in zip(keys, summaries)}  # None: it did not diverge
    lines = ["# DGT against the learning rate and a step-length control (issue #23)\n",
             provenance(command, summaries) + "\n",
             f"{args.rounds} rounds (the paper: 300), {args.seeds} seed(s). `control` = the base's updates scaled by "
             "DGT's per-round aggregate-length ratio (`algo.harmonizer.mode=norm_only`). Accuracy in %.\n",
             "A run whose training loss or model stops being finite ends there as diverged (its last rows, at chance "
             "accuracy, enter its mean of the last 5 rounds).\n",
             "| dataset | base | lr | variant | final | mean of last 5 | rounds to target | diverged at round | "
             "mean norm ratio |",
             "|---|---|---|---|---|---|---|---|---|"]
    verdicts = []
    for dataset in args.datasets.split(","):
        for base in args.bases.split(","):
            for lr in map(float, args.lrs.split(",")):
                stats = {}
                for variant in VARIANTS:
                    runs = [frames[dataset, base, lr, variant, s] for s in range(args.seeds)]
                    last5 = np.mean([100 * f["test_acc"].iloc[-5:].mean() for f in runs])
                    reach = [first_round_reaching(f["test_acc"], targets[dataset]) for f in runs]
                    ratio = np.mean([f["dgt_norm_ratio"].mean() for f in runs]) if "dgt_norm_ratio" in runs[0] \
                        else float("nan")
                    stats[variant] = (last5, reach)
                    broke = [diverged_at[dataset, base, lr, variant, s] for s in range(args.seeds)]
                    lines.append(f"| {dataset} | {base} | {lr:g} | {variant} | "
                                 f"{np.mean([100 * f['test_acc'].iloc[-1] for f in runs]):.2f} | {last5:.2f} | "
                                 f"{', '.join(str(r) if r else f'> {args.rounds}' for r in reach)} | "
                                 f"{', '.join(str(r) if r else '-' for r in broke)} | "
                                 f"{'-' if np.isnan(ratio) else f'{ratio:.3f}'} |")
                diverged = {v: [r for s in range(args.seeds) if (r := diverged_at[dataset, base, lr, v, s])]
                            for v in VARIANTS}
                if any(diverged.values()):
                    verdicts.append(divergence_verdict(dataset, base, lr, diverged, args.rounds))
                    continue
                gain, control = stats["DGT"][0] - stats["base"][0], stats["control"][0] - stats["base"][0]
                verdicts.append(f"- {dataset}, {base}, lr {lr:g}: DGT {gain:+.2f} points over the base (mean of the "
                                f"last 5 rounds), the step-length control {control:+.2f}: "
                                + ("DGT's gain is not explained by its longer step" if gain - control > MARGIN else
                                   "no gain beyond the control's" if gain > MARGIN else
                                   "DGT is below the base, while the control's step of the same length is not: "
                                   "here DGT's directions, not its step, cost accuracy" if gain < -MARGIN
                                   and control > gain + MARGIN else
                                   "DGT is below the base, and so is the control: its longer step costs the "
                                   "accuracy" if gain < -MARGIN and abs(gain - control) <= MARGIN else
                                   "DGT is below the base" if gain < -MARGIN else "no gain"))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    plot(frames, args, out, lines[1].strip())
    lines += ["", "## Verdicts\n", *verdicts, "", f"Re-run: `{command}`. Curves: claims_lr.png (seed 0).", ""]
    (out / "exploration.md").write_text("\n".join(lines))
    print(f"wrote {out / 'exploration.md'}")
    return 0


def first_round_reaching(curve: pd.Series, level: float) -> int | None:
    hit = curve[curve >= level]
    return int(hit.index[0]) if len(hit) else None


def divergence_verdict(dataset: str, base: str, lr: float, diverged: dict[str, list[int]], rounds: int) -> str:
    """The verdict of a rate at which some variant diverged: which did (at which rounds), which did not, and what that
    says of DGT's directions against its step length (the control)."""
    broke = {v: rs for v, rs in diverged.items() if rs}
    said = "; ".join(f"{v} diverged at round {', '.join(map(str, rs))}" for v, rs in broke.items())
    kept = [v for v in diverged if not diverged[v]]
    if kept:
        said += f"; {' and '.join(kept)} did not within {rounds} rounds"
    if broke.keys() == {"base", "control"}:
        meaning = "DGT's directions, not its longer step, kept the base from diverging"
    elif len(broke) == len(diverged):
        meaning = "the rate is beyond the base's stable range here, with or without DGT"
    elif "base" in broke and not broke.keys() & {"DGT", "control"}:
        meaning = "a longer step of DGT's length kept it stable as well: no sign that DGT's directions matter"
    elif broke.keys() == {"DGT", "control"}:
        meaning = "a step of DGT's length made the base diverge, with DGT's directions or the base's own"
    elif broke.keys() == {"DGT"}:
        meaning = "DGT's directions made a stable base diverge"
    else:
        meaning = "no clear reading"
    return f"- {dataset}, {base}, lr {lr:g}: {said}: {meaning}"


def plot(frames, args, out: Path, note: str) -> None:
    """Test accuracy against rounds at each learning rate (one panel per dataset, base and rate), seed 0."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [(d, b, float(lr)) for d in args.datasets.split(",") for b in args.bases.split(",")
              for lr in args.lrs.split(",")]
    fig, axes = plt.subplots(1, len(panels), figsize=(4.5 * len(panels), 3.6), squeeze=False)
    for ax, (dataset, base, lr) in zip(axes[0], panels):
        for variant in VARIANTS:
            f = frames[dataset, base, lr, variant, 0]
            ax.plot(f.index, 100 * f["test_acc"], label=variant)
        ax.set_title(f"{dataset}, {base}, lr {lr:g}", fontsize=9)
        ax.set_xlabel("round")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    axes[0][0].set_ylabel("test accuracy (%)")
    fig.text(0.01, 0.005, note[:200], fontsize=5)
    fig.tight_layout(rect=(0, 0.05, 1, 1))
    fig.savefig(out / "claims_lr.png", dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    sys.exit(main())
