"""BHerd Table II: final test accuracy after T=100 rounds of the ten algorithms, Case 1 and Case 2, mean over seeds.

    python scripts/bherd_table2.py [--seeds K] [--models svm,rnn,cnn] [--algos A,B] [--rounds T]
                                   [--fixture-rounds R] [--workers P]
                                   [--set KEY=VALUE ...] [--runs DIR] [--out DIR]

SVM-MNIST runs on the real MNIST. RNN-IMDB and CNN-CIFAR10 run on IMDB and CIFAR-10 where they are present under
the data root; otherwise on fixtures in their official file formats for --fixture-rounds rounds (so the path is
exercised), and the table marks those rows as not reproduced. Each run keeps its own directory under --runs; a
run whose summary.json says finished is not run again, so an interrupted table resumes. ``--set`` adds overrides
to every run (e.g. ``--set data.normalize=standardize`` for the variant results/bherd/README.md discusses; give it
its own --runs and --out). Writes <out>/table2.md and table2.csv with the paper's numbers beside fedrun's.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

from fedrun.reproduce import fixture_for, provenance, run_jobs

ALGORITHMS = ["centralized", "fedavg", "bherd", "grab_fedavg", "fednova", "bherd_fednova", "scaffold",
              "bherd_scaffold", "feddyn", "bherd_feddyn"]
NAMES = {"centralized": "Centralized SGD", "fedavg": "FedAvg", "bherd": "BHerd", "grab_fedavg": "GraB-FedAvg",
         "fednova": "FedNova", "bherd_fednova": "BHerd-FedNova", "scaffold": "SCAFFOLD",
         "bherd_scaffold": "BHerd-SCAFFOLD", "feddyn": "FedDyn", "bherd_feddyn": "BHerd-FedDyn"}
# Table II of Luo et al. (Acc-C1, Acc-C2 in %); the centralized optimum is only drawn in Fig. 3
PAPER = {
    "svm": {"fedavg": (84.48, 83.60), "bherd": (85.40, 84.56), "grab_fedavg": (84.44, 83.64),
            "fednova": (84.48, 84.04), "bherd_fednova": (85.84, 85.48), "scaffold": (84.48, 84.52),
            "bherd_scaffold": (85.40, 84.44), "feddyn": (85.16, 84.36), "bherd_feddyn": (85.52, 84.72)},
    "rnn": {"fedavg": (55.20, 54.64), "bherd": (57.72, 60.64), "grab_fedavg": (55.24, 54.88),
            "fednova": (55.20, 50.56), "bherd_fednova": (59.56, 52.32), "scaffold": (55.16, 52.12),
            "bherd_scaffold": (57.68, 55.64), "feddyn": (56.44, 55.56), "bherd_feddyn": (60.00, 58.32)},
    "cnn": {"fedavg": (40.00, 34.44), "bherd": (45.56, 37.52), "grab_fedavg": (39.88, 33.20),
            "fednova": (39.92, 31.04), "bherd_fednova": (46.48, 27.60), "scaffold": (39.96, 41.68),
            "bherd_scaffold": (45.56, 42.16), "feddyn": (43.16, 35.32), "bherd_feddyn": (45.20, 27.64)},
}
EXPERIMENTS = {"svm": "bherd_svm_mnist", "rnn": "bherd_rnn_imdb", "cnn": "bherd_cnn_cifar10"}
TOLERANCE = 1.5  # points of accuracy (issue target for SVM-MNIST)
MODEL_LABELS = {"svm": "SVM-MNIST", "rnn": "RNN-IMDB", "cnn": "CNN-CIFAR10"}
MODEL_DATA = {"svm": "mnist", "rnn": "imdb", "cnn": "cifar10"}


def status(row: dict) -> str:
    """Real-data rows: reproduced when both cases are within TOLERANCE points of the paper."""
    diffs = [row["diff_C1"], row["diff_C2"]]
    if any(d is None for d in diffs):
        return "real data; the paper gives no number (Fig. 3 draws the centralized optimum as a line)"
    if all(abs(d) <= TOLERANCE for d in diffs):
        return f"reproduced (within {TOLERANCE} points)"
    return f"real data, NOT within {TOLERANCE} points of the paper (see README.md)"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, default=10, help="runs per cell (the paper averages 10)")
    parser.add_argument("--models", default="svm,rnn,cnn")
    parser.add_argument("--algos", default=",".join(ALGORITHMS), help="a subset of the rows")
    parser.add_argument("--rounds", type=int, default=100)
    parser.add_argument("--fixture-rounds", type=int, default=2, help="rounds of a run on a fixture (not a result)")
    parser.add_argument("--workers", type=int, default=1, help="runs in parallel processes")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override for every run")
    parser.add_argument("--runs", default="outputs/bherd_table2", help="where each run's directory goes")
    parser.add_argument("--out", default="results/bherd")
    args = parser.parse_args(argv)
    models, algos = args.models.split(","), args.algos.split(",")
    unknown = sorted(set(algos) - set(ALGORITHMS))
    if unknown:
        parser.error(f"--algos {','.join(unknown)}: not a Table II algorithm; choose from {','.join(ALGORITHMS)}")
    cells, jobs, notes = [], [], {}
    for model in models:
        extra, notes[model] = fixture_for(MODEL_DATA[model]) if model != "svm" else ([], None)
        if notes[model]:
            notes[model] += f", {args.fixture_rounds} rounds"
        for algo in algos:
            for case in ("case1", "case2"):
                for seed in range(args.seeds):
                    cells.append((model, algo, case))
                    rounds = args.fixture_rounds if notes[model] else args.rounds
                    jobs.append(([f"experiment={EXPERIMENTS[model]}", f"algo={algo}", f"partition={case}",
                                  f"seed={seed}", f"fl.rounds={rounds}", *extra, *args.set],
                                 str(Path(args.runs) / model / case / algo / f"seed{seed}")))
    summaries = run_jobs(jobs, args.workers)
    accs: dict[tuple, list[float]] = {}
    for cell, summary in zip(cells, summaries):
        accs.setdefault(cell, []).append(100 * summary["final_test_acc"])
    rows = []
    for model in models:
        for algo in algos:
            paper = PAPER[model].get(algo, (None, None))
            row = {"model": MODEL_LABELS[model], "algorithm": NAMES[algo]}
            for i, case in enumerate(("case1", "case2")):
                s = pd.Series(accs[model, algo, case])
                key = f"C{i + 1}"
                row |= {f"paper_{key}": paper[i], f"fedrun_{key}": s.mean(), f"std_{key}": s.std(ddof=1),
                        f"diff_{key}": None if paper[i] is None or notes[model] else s.mean() - paper[i]}
            row["status"] = notes[model] or status(row)
            rows.append(row)
    command = "python scripts/bherd_table2.py " + " ".join(argv if argv is not None else sys.argv[1:])
    made_by = provenance(command, summaries)  # before any file is written: the tree is still clean
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(rows).to_csv(out / "table2.csv", index=False)
    lines = ["| Model | Algorithm | paper C1 | fedrun C1 | diff C1 | paper C2 | fedrun C2 | diff C2 | status |",
             "|---|---|---|---|---|---|---|---|---|"]
    fmt = lambda v: "-" if v is None or pd.isna(v) else f"{v:.2f}"  # noqa: E731
    for r in rows:
        lines.append(f"| {r['model']} | {r['algorithm']} | {fmt(r['paper_C1'])} | {fmt(r['fedrun_C1'])} ± "
                     f"{fmt(r['std_C1'])} | {fmt(r['diff_C1'])} | {fmt(r['paper_C2'])} | {fmt(r['fedrun_C2'])} ± "
                     f"{fmt(r['std_C2'])} | {fmt(r['diff_C2'])} | {r['status']} |")
    header = (f"# BHerd Table II: final test accuracy (%) after {args.rounds} rounds\n\n"
              f"{made_by} Mean ± std over {args.seeds} seeds (0..{args.seeds - 1}); the "
              f"paper averages 10 runs. Setting: experiment presets {', '.join(EXPERIMENTS[m] for m in models)} "
              f"(N=5, all clients every round, B=100, E=1, eta=2e-4 (SVM, CNN) and 2e-3 (RNN), alpha=0.5)"
              f"{' with ' + ', '.join(args.set) if args.set else ''}; Case 1 = partition=case1, Case 2 = "
              f"partition=case2 (NOTES.md).\n\n")
    (out / "table2.md").write_text(header + "\n".join(lines) + "\n")
    print(f"wrote {out / 'table2.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
