"""The default experiment's round on a CPU that other work shares: how each way of running it degrades.

    python scripts/bench/busy_cpu_bench.py [--repeats 3] [--rounds 1]

Runs ``fedrun fl.rounds=1 progress=false logger=none`` (LeNet-5, 10 MNIST clients: the default experiment's round)
beside 0, 1 and 2 competing processes that each keep one core busy (``python -c "while True: pass"``), under each
candidate setting: OpenMP's waiting threads sleeping (fedrun's default: ``OMP_WAIT_POLICY=PASSIVE``, set by
``import fedrun`` unless the environment sets it), spinning (``OMP_WAIT_POLICY=ACTIVE``) or the OpenMP library's own
default (spin a while, then sleep: the variable set empty), one intra-op thread, and the loop executor. The time is the
run's own training time (summary.json's ``wall_time_s``: data loaded and model built before it), median of the
repeats, candidates interleaved so that a drift of the machine falls on all. Writes results/newcomer/busy-cpu.json and
.md (the table, the machine, the commit, this command). MNIST must be there (``make data``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from fedrun.rundir.files import cpu_model, git_commit

REPO = Path(__file__).resolve().parents[2]
OUT = REPO / "results" / "newcomer" / "busy-cpu"
# name: (environment, overrides)
CANDIDATES = {
    "fedrun's default (OpenMP threads sleep while waiting)": ({}, []),
    "OpenMP library's default (spin, then sleep)": ({"OMP_WAIT_POLICY": ""}, []),
    "OpenMP threads spin (OMP_WAIT_POLICY=ACTIVE)": ({"OMP_WAIT_POLICY": "ACTIVE"}, []),
    "hardware.num_threads=1": ({}, ["hardware.num_threads=1"]),
    "hardware.executor=loop": ({}, ["hardware.executor=loop"]),
}
COMPETITORS = (0, 1, 2)


def one_run(env: dict, overrides: list[str], rounds: int, workdir: str) -> float:
    run_dir = tempfile.mkdtemp(dir=workdir)
    environment = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"} | env
    subprocess.run([sys.executable, "-m", "fedrun.cli", f"fl.rounds={rounds}", "progress=false", "logger=none",
                    *overrides, f"hydra.run.dir={run_dir}"], env=environment, cwd=workdir, check=True,
                   capture_output=True, timeout=3600)
    return json.loads((Path(run_dir) / "summary.json").read_text())["wall_time_s"]


def busy(n: int) -> list[subprocess.Popen]:
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]


def measure(repeats: int, rounds: int) -> dict:
    times = {name: {k: [] for k in COMPETITORS} for name in CANDIDATES}
    with tempfile.TemporaryDirectory() as workdir:
        for k in COMPETITORS:
            competitors = busy(k)
            try:
                time.sleep(1.0)  # the competitors running before the first run starts
                for rep in range(repeats):
                    for name, (env, overrides) in CANDIDATES.items():
                        took = one_run(env, overrides, rounds, workdir)
                        times[name][k].append(took)
                        print(f"{k} busy, {name}: {took:.1f} s", file=sys.stderr)
            finally:
                for p in competitors:
                    p.kill()
                    p.wait()
    medians = {name: {k: statistics.median(v) for k, v in per.items()} for name, per in times.items()}
    return {"seconds": times, "median_s": medians, "machine": f"{cpu_model()}, {os.cpu_count()} cores",
            "commit": git_commit(), "date": time.strftime("%Y-%m-%d"), "repeats": repeats, "rounds": rounds,
            "command": " ".join(["python scripts/bench/busy_cpu_bench.py", *sys.argv[1:]])}


def table(m: dict) -> str:
    default = m["median_s"][next(iter(CANDIDATES))]
    head = "| setting | " + " | ".join(f"{k} busy" for k in COMPETITORS) + " | 1 busy / its quiet |"
    rows = [head, "|---" * (len(COMPETITORS) + 2) + "|"]
    for name, per in m["median_s"].items():
        cells = " | ".join(f"{per[k]:.1f} s" for k in COMPETITORS)
        rows.append(f"| {name} | {cells} | {per[1] / per[0]:.2f}x |")
    return (f"# The default experiment's round beside busy processes\n\nMade by `{m['command']}` on {m['date']}, "
            f"{m['machine']}, at commit {m['commit']}: the training time of `fedrun fl.rounds={m['rounds']}` "
            f"(LeNet-5, MNIST, 10 clients; summary.json's wall_time_s), median of {m['repeats']}, beside 0, 1 and 2 "
            "processes that each keep a core busy.\n\n" + "\n".join(rows) + "\n\n"
            f"With one busy process, fedrun's default takes {default[1] / default[0]:.2f}x its quiet time.\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args(argv)
    m = measure(args.repeats, args.rounds)
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.with_suffix(".json").write_text(json.dumps(m, indent=2) + "\n")
    OUT.with_suffix(".md").write_text(table(m))
    print(table(m))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
