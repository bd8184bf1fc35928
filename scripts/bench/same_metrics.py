"""Whether a change of the engine left every algorithm family's results as they were (issue #25's "behaviour
unchanged"): one small run per family at another checkout and at this one, their metrics.csv compared.

    python scripts/bench/same_metrics.py --baseline PATH [--model mlp] [--this OVERRIDE ...] [--out FILE.md]

PATH is a checkout of fedrun to compare with (``git worktree add ../base <commit>``); both run on this interpreter
with PYTHONPATH pointing at the checkout, one thread, on the bundled digits (6 clients, 4 per round, 4 rounds). The
columns that hold wall-clock time (``elapsed_s``, a bank's ``server_s``) are left out; every other column must be
equal bit for bit (the CSVs' decimal strings); a family that differs names the columns that do. ``--this KEY=VALUE``
(repeatable) sets an override for this checkout's runs only: a switch the baseline does not have, set to the
baseline's behaviour (``--this hardware.onednn=false``), shows that nothing else changed. ``--model`` is the families'
model (a 2NN by default; ``cnn3`` takes the convolutional paths: the cohort network, a CNN's forward by hand); the
FSVRG families keep their linear model.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd
from fedrun.config.renames import RENAMED
from fedrun.rundir.files import git_commit
from startup_bench import REPO

COMMON = ["data=digits", "fl.num_clients=6", "fl.clients_per_round=4", "fl.rounds=4", "progress=false",
          "logger=csv"]
BANK = ["model=logreg", "algo.bank.threshold=1", "algo.bank.models=2"]
FAMILIES = {
    **{algo: [f"algo={algo}"] for algo in ("fedavg", "fedprox", "scaffold", "feddyn", "fednova", "feddecorr", "fedadam",
                                           "bherd", "bherd_scaffold", "grab_fedavg", "fedgh", "dgt", "perfedavg",
                                           "mimesvrg", "losac", "centralized")},
    "random subset": ["algo=bherd", "algo/step_selector=random"],
    "dgt norm_only": ["algo=dgt", "algo.harmonizer.mode=norm_only"],
    "gift": ["algo=gift", "algo.schedule.tau0=6", "algo.schedule.patience=1"],
    "adacomm": ["algo/schedule=adacomm", "algo.schedule.tau0=6"],
    "afl": ["algo/schedule=afl", "timing=simulated", "timing.step_time_s=0.01", "timing.budget_s=100"],
    "fixed tau switch": ["algo.schedule.tau=3", "algo.schedule.switch_round=2", "algo.schedule.switch_tau=1"],
    "fsvrg": ["algo=fsvrg", "model=logreg"],
    "mafsvrg": ["algo=mafsvrg", *BANK],
    "gafsvrg": ["algo=gafsvrg", *BANK],
}
WALL_CLOCK = ("elapsed_s", "server_s")


def differing_columns(base: pd.DataFrame, this: pd.DataFrame) -> list[str]:
    """The columns whose values differ (all of them when the tables' shapes or columns do)."""
    if list(base.columns) != list(this.columns) or len(base) != len(this):
        return sorted(set(base.columns) | set(this.columns))
    return [c for c in this.columns if not base[c].equals(this[c])]


def spelled_for(checkout: Path, overrides: list[str]) -> list[str]:
    """The overrides as ``checkout`` reads them: a checkout from before a rename (``algo/step_selector`` was
    ``algo/selector``) gets the old spelling."""
    for old, new in RENAMED.items():
        if not (checkout / "conf" / new.replace(".", "/")).is_dir():
            overrides = [o.replace(new.replace(".", "/"), old.replace(".", "/")).replace(new, old) for o in overrides]
    return overrides


def metrics(checkout: Path, overrides: list[str], run_dir: Path) -> pd.DataFrame:
    overrides = spelled_for(checkout, overrides)
    env = {**os.environ, "PYTHONPATH": str(checkout), "OMP_NUM_THREADS": "1"}
    subprocess.run([sys.executable, "-m", "fedrun.cli", *COMMON, *overrides, f"hydra.run.dir={run_dir}"], env=env,
                   cwd=checkout, check=True, capture_output=True)  # a family's model= comes after --model's
    table = pd.read_csv(run_dir / "metrics.csv", dtype=str)
    return table.drop(columns=[c for c in WALL_CLOCK if c in table])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--baseline", required=True, type=Path, help="a checkout of fedrun to compare with")
    parser.add_argument("--this", action="append", default=[], metavar="KEY=VALUE",
                        help="an override for this checkout's runs only (repeatable)")
    parser.add_argument("--model", default="mlp", help="the families' model (conf/model; default mlp)")
    parser.add_argument("--out", default=None, help="write the table here (Markdown)")
    args = parser.parse_args(argv)
    if not (args.baseline / "fedrun" / "cli.py").exists():
        parser.error(f"--baseline {args.baseline}: no fedrun checkout there (make one with `git worktree add "
                     f"{args.baseline} <commit>`)")
    rows, differ = ["| family | overrides | rows x columns | metrics.csv |", "|---|---|---|---|"], 0
    with tempfile.TemporaryDirectory() as workdir:
        for n, (family, overrides) in enumerate(FAMILIES.items(), 1):
            model = [f"model={args.model}"]
            base, this = (metrics(path, extra, Path(workdir) / f"{n}-{side}")
                          for side, path, extra in (("baseline", args.baseline.resolve(), [*model, *overrides]),
                                                    ("this", REPO, [*model, *overrides, *args.this])))
            columns = differing_columns(base, this)
            differ += bool(columns)
            rows.append(f"| {family} | `{' '.join(overrides)}` | {this.shape[0]} x {this.shape[1]} | "
                        f"{'DIFFERENT: ' + ', '.join(columns) if columns else 'identical'} |")
            print(rows[-1], flush=True)
    command = "python scripts/bench/same_metrics.py " + " ".join(argv if argv is not None else sys.argv[1:])
    verdict = "every family identical" if not differ else f"{differ} of {len(FAMILIES)} families differ"
    text = (f"# Same results before and after (issue #25)\n\nMade by `{command}` on {time.strftime('%Y-%m-%d')}: "
            f"baseline at commit {git_commit(args.baseline)}, this at {git_commit(REPO)}"
            f"{' with ' + ' '.join(args.this) if args.this else ''}; `fedrun {' '.join(COMMON)} model={args.model} "
            f"<overrides>` per family, one thread; metrics.csv compared as text without {', '.join(WALL_CLOCK)}: "
            f"**{verdict}**.\n\n" + "\n".join(rows) + "\n")
    print(text)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text)
    return 1 if differ else 0


if __name__ == "__main__":
    raise SystemExit(main())
