"""What one run over torch.distributed ranks costs on this machine: each setting as one process and as ``--ranks``
torchrun ranks (gloo on a CPU, NCCL on GPUs), its seconds per round, the seconds each round waited on the exchange
of the cohort's results and the megabytes rank 0 received, beside the model of that traffic, and how far the ranks'
test losses moved from one process's.

    python scripts/bench/ranks_bench.py [--ranks 2] [--rounds 3] [--settings default,default_rows,...]
                                        [--out results/bench] [--extra KEY=VALUE ...]

Writes <out>/ranks-<device>.md and .json. The one process uses every core (torch's threads); each of the R ranks
uses cores/R threads, so both use the same cores. The model (docs/running.md): with the updates' sums all-reduced
(``hardware.exchange=sums``), a ring all-reduce moves 2 (R - 1) / R x d values through each rank per round; with
the updates exchanged as rows, every rank receives every other rank's clients' updates, (K - K_r) x d values; a step
selector (BHerd) sends what each client's selection made instead, 2 d values (GraB 3 d), its steps staying on their
rank. The exchange's time on one machine is that
traffic through gloo's TCP loopback plus pickling, and the ranks' wait for the slowest share.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from fedrun.rundir.files import device_name, git_commit

REPO = Path(__file__).resolve().parents[2]
SETTINGS = {  # name: (what it is, its overrides)
    "default": ("the default experiment (LeNet-5, MNIST, 10 clients, all each round; FedAvg's weighted mean "
                "all-reduced)", []),
    "default_rows": ("the same with every update sent to every rank (hardware.exchange=rows)",
                     ["hardware.exchange=rows"]),
    "loop_sums": ("the default experiment with the loop executor (each client's arithmetic that of one process): "
                  "what the all-reduce's order of addition alone changes, in float32",
                  ["hardware.executor=loop"]),
    "loop_rows": ("the same with the updates as rows: one process's result bit for bit",
                  ["hardware.executor=loop", "hardware.exchange=rows"]),
    "bherd": ("BHerd on it (alpha 0.5: every step's gradient recorded and herded on its client's rank)",
              ["algo=bherd"]),
}


def run(command: list[str], threads: int, run_dir: Path) -> dict:
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "PYTHONPATH": str(REPO)}
    started = time.perf_counter()
    subprocess.run(command + [f"hydra.run.dir={run_dir}"], env=env, cwd=REPO, check=True, capture_output=True)
    return json.loads((run_dir / "summary.json").read_text()) | {"command_s": time.perf_counter() - started}


def modelled_mb(run_dir: Path, ranks: int) -> float:
    """Megabytes rank 0 receives per round by the traffic model: the ring all-reduce of one sum of d values, or the
    other ranks' clients' updates; a step selector's clients send their update as sent and g_i (GraB: and its mean
    step) besides."""
    import yaml

    from fedrun.engine.execution.ranks import Ranks

    config = yaml.safe_load((run_dir / "config.yaml").read_text())
    summary = json.loads((run_dir / "summary.json").read_text())
    sizes = [c["num_samples"] for c in json.loads((run_dir / "partition.json").read_text())["clients"]]
    fl, d = config["fl"], summary["num_parameters"]
    taus = [max(1, int(fl["local_epochs"] * n // fl["batch_size"])) for n in sizes]
    shares = Ranks(0, ranks).shares(taus)
    selector, rows = config["algo"]["step_selector"]["name"], summary["exchange"] == "rows"
    per_client = d * (rows + (2 if selector != "all" else 0) + (selector == "grab"))
    values = sum(per_client for s in shares[1:] for _ in s)
    if selector == "all" and not rows:
        values += 2 * (ranks - 1) / ranks * d
    return values * 4 / 2**20


def loss_gap(one: Path, many: Path) -> float:
    """The largest |test loss of the ranks - one process's| over the rounds."""
    import pandas as pd

    a, b = (pd.read_csv(d / "metrics.csv")["test_loss"] for d in (one, many))
    return float((a - b).abs().max())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--settings", default=",".join(SETTINGS))
    parser.add_argument("--out", default="results/bench")
    parser.add_argument("--extra", nargs="*", default=[], metavar="KEY=VALUE",
                        help="overrides for every run (a quick look: --extra data=digits model=logreg)")
    args = parser.parse_args(argv)
    cores = os.cpu_count() or 1
    device = "cuda" if torch.cuda.is_available() else "cpu"
    records, rows = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.settings.split(","):
            common = [*SETTINGS[name][1], f"fl.rounds={args.rounds}", "progress=false", "checkpoint.every=0",
                      *args.extra]
            one_dir = Path(tmp) / f"{name}-one"
            one = run([sys.executable, "-m", "fedrun", *common], cores, one_dir)
            many_dir = Path(tmp) / f"{name}-ranks"
            many = run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node",
                        str(args.ranks), "-m", "fedrun", *common], max(1, cores // args.ranks), many_dir)
            per_round = {k: s["wall_time_s"] / args.rounds for k, s in (("one", one), ("ranks", many))}
            record = {"setting": name, "rounds": args.rounds, "ranks": args.ranks, "one_s_per_round": per_round["one"],
                      "ranks_s_per_round": per_round["ranks"], "exchange_s_per_round": many["exchange_s"] / args.rounds,
                      "exchange_mb_per_round": many["exchange_mb"] / args.rounds,
                      "modelled_mb_per_round": modelled_mb(many_dir, args.ranks), "exchange": many["exchange"],
                      "test_loss_gap": loss_gap(one_dir, many_dir),
                      "same_accuracy": one["final_test_acc"] == many["final_test_acc"],
                      "final_test_acc": [one["final_test_acc"], many["final_test_acc"]]}
            records.append(record)
            share = record["exchange_s_per_round"] / record["ranks_s_per_round"]
            rows.append(f"| {name} | {record['exchange']} | {record['one_s_per_round']:.2f} | "
                        f"{record['ranks_s_per_round']:.2f} | "
                        f"{record['exchange_s_per_round']:.3f} ({100 * share:.0f}%) | "
                        f"{record['exchange_mb_per_round']:.1f} | {record['modelled_mb_per_round']:.1f} | "
                        f"{record['test_loss_gap']:.2e} | "
                        f"{record['final_test_acc'][0]:.4f} / {record['final_test_acc'][1]:.4f} |")
            print(rows[-1], flush=True)
    command = "python scripts/bench/ranks_bench.py " + " ".join(argv if argv is not None else sys.argv[1:])
    text = (f"# One run over {args.ranks} ranks on {device_name(torch.device(device))}\n\n"
            f"Made by `{command}` on {time.strftime('%Y-%m-%d')} at commit {git_commit(REPO)}: "
            f"{' '.join(args.extra) or 'MNIST'}, seed 0, "
            f"{args.rounds} rounds; one process with {cores} threads against {args.ranks} torchrun ranks with "
            f"{max(1, cores // args.ranks)} each ({'NCCL' if device == 'cuda' else 'gloo'}). The exchange: seconds "
            f"rank 0 waited per round for every rank's clients' results (its share of the round) and the megabytes "
            f"it received, beside the traffic model's (float32: a ring all-reduce's 2 (R - 1) / R x d values for the "
            f"updates' sum; or the other ranks' updates, and their steps for BHerd). Test-loss gap: the largest "
            f"|ranks - one process| over the rounds; final accuracy: one process / ranks (the default executor, "
            f"vmap, rounds differently over another number of clients; the loop executor is one process's "
            f"arithmetic client by client).\n\n"
            "| setting | updates exchanged as | one process, s/round | ranks, s/round | exchange, s/round (share) | "
            "received, MB/round | model, MB/round | test-loss gap | final accuracy |\n"
            "|---|---|---|---|---|---|---|---|---|\n" + "\n".join(rows) + "\n\n"
            + "\n".join(f"- {n}: {SETTINGS[n][0]}" for n in args.settings.split(",")) + "\n")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"ranks-{device}.md").write_text(text)
    (out / f"ranks-{device}.json").write_text(json.dumps({"command": command, "commit": git_commit(REPO),
                                                         "records": records}, indent=2) + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
