"""Process start-up of fedrun against another checkout of it (issue #27): what every job of a sweep pays once.

    python scripts/bench/startup_bench.py --baseline PATH [--repeats 5] [--default-run]
                                          [--out results/bench/startup-cpu.md]

PATH is a checkout of fedrun to compare with (e.g. ``git worktree add ../base <commit>``); both run on this
interpreter and its packages, with PYTHONPATH pointing at the checkout, in interleaved pairs (baseline, this), so
that the load of the machine falls on both alike. Five commands are timed whole, wall clock: ``import fedrun.cli``,
``fedrun --help``, ``fedrun-data list``, a one-round run on the bundled digits (``data=digits model=logreg
fl.rounds=1 logger=none``), whose time is mostly start-up, and one of the default experiment's rounds cut to a few
steps (``fl.rounds=1 fl.local_epochs=0.02``: MNIST loaded, scaled and fingerprinted, and LeNet-5 evaluated on its
10,000 test images; MNIST must be there: ``make data``); with ``--default-run`` also the default experiment
(``make run``'s command: LeNet-5, 10 MNIST clients, 10 rounds). Writes the medians and their ratios to --out
(Markdown) and prints them.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from fedrun.rundir.files import git_commit

REPO = Path(__file__).resolve().parents[2]
COMMANDS = {
    "import fedrun.cli": ["-c", "import fedrun.cli"],
    "fedrun --help": ["-m", "fedrun.cli", "--help"],
    "fedrun-data list": ["-m", "fedrun.data.cli", "list"],
    "one-round run (digits, logreg)": ["-m", "fedrun.cli", "data=digits", "model=logreg", "fl.rounds=1", "logger=none",
                                       "progress=false", "hardware.num_threads=1"],
    "one-round run (MNIST, LeNet-5, a few steps)": ["-m", "fedrun.cli", "fl.rounds=1", "fl.local_epochs=0.02",
                                                    "logger=none", "progress=false", "hardware.num_threads=1"],
}
DEFAULT_RUN = {"default experiment (make run)": ["-m", "fedrun.cli", "progress=false", "logger=none"]}


def timed(checkout: Path, args: list[str], workdir: str) -> float:
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    extra = [f"hydra.run.dir={tempfile.mkdtemp(dir=workdir)}"] if "progress=false" in args else []
    started = time.perf_counter()
    subprocess.run([sys.executable, *args, *extra], env=env, cwd=workdir, check=True, capture_output=True)
    return time.perf_counter() - started


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--baseline", required=True, type=Path, help="a checkout of fedrun to compare with")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--default-run", action="store_true", help="also time the default experiment (minutes)")
    parser.add_argument("--out", default=None, help="write the table here (Markdown)")
    args = parser.parse_args(argv)
    commands = COMMANDS | (DEFAULT_RUN if args.default_run else {})
    if not (args.baseline / "fedrun" / "cli.py").exists():
        parser.error(f"--baseline {args.baseline}: no fedrun checkout there (make one with `git worktree add "
                     f"{args.baseline} <commit>`)")
    checkouts = {"baseline": args.baseline.resolve(), "this": REPO}
    times = {(name, c): [] for name in commands for c in checkouts}
    with tempfile.TemporaryDirectory() as workdir:
        for _ in range(args.repeats):
            for name, command in commands.items():
                for c, path in checkouts.items():
                    times[name, c].append(timed(path, command, workdir))
    rows = ["| command | baseline (s) | this (s) | speed-up |", "|---|---|---|---|"]
    for name in commands:
        base, this = (statistics.median(times[name, c]) for c in checkouts)
        rows.append(f"| `{name}` | {base:.2f} | {this:.2f} | {base / this:.2f}x |")
    command = "python scripts/bench/startup_bench.py " + " ".join(argv if argv is not None else sys.argv[1:])
    text = (f"# Process start-up (issue #27)\n\nMade by `{command}` on {time.strftime('%Y-%m-%d')}: baseline at "
            f"commit {git_commit(checkouts['baseline'])}, this at {git_commit(REPO)}; medians of {args.repeats} "
            f"interleaved pairs, whole processes, wall clock, on {os.cpu_count()} cores; the one-round runs on one "
            f"thread, the default experiment on torch's default (load average {os.getloadavg()[0]:.1f} at the end: "
            "other work shares the machine alike with both).\n\n"
            + "\n".join(rows) + "\n")
    print(text)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
