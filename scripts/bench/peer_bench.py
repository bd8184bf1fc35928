"""fedrun against FL-bench on FL-bench's own FedAvg workload (issue #27), in interleaved pairs on one machine.

    python scripts/bench/peer_bench.py --flbench PATH [--flbench-python PY] [--clients 20,200,1000] [--rounds 20]
                                 [--pairs 1] [--out results/bench/peer-cpu.md]

The workload: FedProx synthetic(1, 1) made by FL-bench's generator (``generate_data.py -d synthetic --gamma 1
--beta 1``, 60 features, 10 classes, a quarter of each client's samples for its test split), FL-bench's 2NN (two
hidden layers of 200; fedrun's ``model=mlp``), FedAvg with E = 5, B = 32, SGD at lr 0.01, 10% of the clients per
round, every process on one thread. fedrun reads the very samples FL-bench generated (written as LEAF JSON, one user
per FL-bench client, ``data=leaf_synthetic data.source=json partition=natural``), and both tools train on fedrun's
client-sampling sequence (handed to FL-bench), so that their accuracies are comparable run for run. Both evaluate
the global model on every client's test split after every round. Each tool's data preparation happens once, before
the pairs: FL-bench's generator, and fedrun's cache of the JSON it reads.

FL-bench changes made for the comparison, in its process only (its files are not edited): its datasets divide any
input whose maximum exceeds 1 by 255 (meant for pixels), which shrinks synthetic features ~100-fold and stalls
training: that rescaling is switched off. Its client sampling is replaced by fedrun's sequence. Its clients'
own evaluation before and after training is off (``common.client_side_evaluation=false``), as fedrun has none.

Measured, per tool and client count: the whole process (wall clock, start to exit), the time per round of training
(each tool's round without evaluation, by the same timer around FL-bench's ``train_one_round`` and fedrun's
``Simulation.run_round``), the time per round with its evaluation, the final test accuracy and the process's peak
resident memory. Pairs alternate which tool runs first. FL-bench's generator writes into its checkout
(``data/synthetic``), replacing what was there.

FL-bench is not on PyPI and these machines cannot reach GitHub: get it with ``git clone
https://github.com/KarhouTam/FL-bench PATH`` where you can, and install its requirements into a virtual environment
whose interpreter you pass as ``--flbench-python`` (for FedAvg, ``pip install torch torchvision hydra-core omegaconf
rich scikit-learn pandas numpy matplotlib pynvml flwr-datasets ray`` suffices at FL-bench 06e658b, whose server
imports ``ray`` and whose generator imports ``flwr_datasets``; ``visdom`` is not needed).
"""

from __future__ import annotations

import argparse
import json
import os
import runpy
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TIMES_ENV = "PEER_BENCH_TIMES"  # where a worker writes its per-round times
STREAM_ENV = "PEER_BENCH_STREAM"  # the client-sampling sequence FL-bench is to follow
ONE_THREAD = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
E, B, LR, FRACTION = 5, 32, 0.01, 0.1


def _timed(cls, name: str, times: dict, key: str) -> None:
    """Wrap ``cls.name`` so that every call's wall time is appended to ``times[key]``."""
    inner = getattr(cls, name)

    def wrapper(self, *args, **kwargs):
        started = time.perf_counter()
        try:
            return inner(self, *args, **kwargs)
        finally:
            times[key].append(time.perf_counter() - started)

    setattr(cls, name, wrapper)


def _dump(times: dict) -> None:
    """The worker's times, and its peak resident memory: VmHWM of this process image (the kernel's ru_maxrss would
    include the memory of the bench process it was forked from)."""
    status = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines() if ":" in line)
    peak_mb = int(status["VmHWM"].split()[0]) / 1024 if "VmHWM" in status else None
    Path(os.environ[TIMES_ENV]).write_text(json.dumps({**times, "peak_mb": peak_mb}))


def flbench_worker(argv: list[str]) -> None:
    """Run FL-bench's main.py (cwd: its checkout) with the comparison's changes; write the round times and the
    final accuracy."""
    import torch

    torch.set_num_threads(1)
    sys.path.insert(0, os.getcwd())
    from data.utils import datasets
    from src.server.fedavg import FedAvgServer

    datasets.BaseDataset._rescale_data = lambda self: None  # its 1/255 rescaling of inputs above 1 (see the doc)
    stream = json.loads(Path(os.environ[STREAM_ENV]).read_text())
    times = {"train": [], "eval": [], "accuracy": None}
    init = FedAvgServer.__init__

    def __init__(self, *args, **kwargs):
        init(self, *args, **kwargs)
        self.client_sample_stream = stream

    FedAvgServer.__init__ = __init__
    _timed(FedAvgServer, "train_one_round", times, "train")
    _timed(FedAvgServer, "test_client_models", times, "eval")
    run = FedAvgServer.run_experiment

    def run_experiment(self):
        run(self)
        last = self.test_results[max(self.test_results)]["all_clients"]["before"]["test"]
        times["accuracy"] = last.accuracy / 100
        _dump(times)

    FedAvgServer.run_experiment = run_experiment
    sys.argv = ["main.py", *argv]
    runpy.run_path("main.py", run_name="__main__")  # as `python main.py` (its logs go to its out/ folder)


def fedrun_worker(argv: list[str]) -> None:
    """Run ``fedrun <argv>`` with the same timers as FL-bench's worker."""
    from fedrun import cli
    from fedrun.engine.run.evaluation import Evaluation
    from fedrun.engine.run.simulation import Simulation

    times = {"train": [], "eval": []}
    _timed(Simulation, "run_round", times, "train")
    _timed(Evaluation, "evaluate", times, "eval")
    sys.argv = ["fedrun", *argv]
    try:
        cli.main()
    finally:
        _dump(times)


def generate(flbench: Path, python: str, clients: int) -> Path:
    """FL-bench's synthetic(1, 1) for ``clients`` clients, in its checkout's data/synthetic."""
    subprocess.run([python, "generate_data.py", "-d", "synthetic", "-cn", str(clients), "--gamma", "1", "--beta", "1",
                    "-pd", "0", "--seed", "42"], cwd=flbench, check=True, capture_output=True,
                   env={**os.environ, **ONE_THREAD})
    return flbench / "data" / "synthetic"


def as_leaf_json(source: Path, root: Path) -> tuple[int, int]:
    """FL-bench's generated samples as LEAF JSON under ``root``/leaf/synthetic/data/{train,test}: one user per FL-bench
    client, in its order, with its own train and test samples. Returns (features, classes)."""
    import numpy as np

    from fedrun.data.safe_pickle import load_numpy_pickle

    x, y = np.load(source / "data.npy"), np.load(source / "targets.npy")
    indices = load_numpy_pickle((source / "partition.pkl").read_bytes())["data_indices"]
    for split in ("train", "test"):
        users = [f"f_{i:05d}" for i in range(len(indices))]
        blob = {"users": users, "num_samples": [len(part[split]) for part in indices],
                "user_data": {u: {"x": x[part[split]].tolist(), "y": y[part[split]].tolist()}
                              for u, part in zip(users, indices)}}
        folder = root / "leaf" / "synthetic" / "data" / split
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "all_data.json").write_text(json.dumps(blob))
    return x.shape[1], int(y.max()) + 1


def data_overrides(root: Path, features: int, classes: int) -> list[str]:
    return ["data=leaf_synthetic", "data.source=json", f"data.root={root}", f"data.num_classes={classes}",
            f"data.num_dim={features}"]


def warm_cache(root: Path, features: int, classes: int) -> None:
    """fedrun parses LEAF JSON once and keeps the arrays (``<root>/leaf/synthetic/data/cache``): done here, before
    the pairs, as FL-bench's generator partitions once before its runs."""
    from fedrun.config.compose import compose_config
    from fedrun.data import load_dataset

    load_dataset(compose_config(data_overrides(root, features, classes)).data)


def sampling_stream(clients: int, rounds: int, seed: int) -> list[list[int]]:
    """fedrun's client-sampling sequence (rounds 1..R), which FL-bench is handed."""
    from fedrun.engine.run.sampling import sample_clients

    per_round = max(1, int(clients * FRACTION))
    return [sample_clients(clients, per_round, seed, r).tolist() for r in range(1, rounds + 1)]


def run_tool(cmd: list[str], cwd: Path, env: dict) -> dict:
    """Run one tool's process; its whole wall time, peak memory and the times its worker wrote."""
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        times_file = Path(f.name)
    started = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=cwd, env={**os.environ, **ONE_THREAD, **env, TIMES_ENV: str(times_file)},
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    output = proc.stdout.read()
    status = proc.wait()
    whole = time.perf_counter() - started
    if status != 0 or not times_file.stat().st_size:
        raise RuntimeError(f"{' '.join(cmd[:4])} ... failed:\n{output.decode(errors='replace')[-3000:]}")
    times = json.loads(times_file.read_text())
    times_file.unlink()
    return {"whole_s": whole, **times}


def commands(flbench: Path, python: str, clients: int, rounds: int, seed: int, root: Path, out: Path,
             stream_file: Path, features: int, classes: int) -> dict[str, tuple[list[str], Path, dict]]:
    per_round = max(1, int(clients * FRACTION))
    fedrun = [sys.executable, str(Path(__file__).resolve()), "--worker", "fedrun",
              *data_overrides(root, features, classes), "partition=natural", "model=mlp",
              f"fl.num_clients={clients}", f"fl.clients_per_round={per_round}", f"fl.rounds={rounds}",
              f"fl.local_epochs={E}", f"fl.batch_size={B}", f"fl.lr={LR}", "eval.every=1",
              "hardware=cpu", "hardware.num_threads=1", f"seed={seed}", "logger=none", "progress=false",
              f"hydra.run.dir={out / 'fedrun'}"]
    flb = [python, str(Path(__file__).resolve()), "--worker", "flbench", "method=fedavg", "dataset.name=synthetic",
           "model.name=2nn", f"common.local_epoch={E}", f"common.batch_size={B}", f"common.join_ratio={FRACTION}",
           f"common.global_epoch={rounds}", f"optimizer.lr={LR}", "common.use_cuda=false", "common.save_log=false",
           "common.save_learning_curve_plot=false", "common.save_metrics=false",
           "common.client_side_evaluation=false", "common.test.client.interval=1", "common.verbose_gap=100000",
           f"common.seed={seed}", "mode=serial"]
    return {"fedrun": (fedrun, REPO, {"PYTHONPATH": str(REPO)}),
            "FL-bench": (flb, flbench, {STREAM_ENV: str(stream_file), "PYTHONPATH": str(flbench)})}


def final_accuracy(tool: str, record: dict, out: Path) -> float:
    if tool == "fedrun":
        return json.loads((out / "fedrun" / "summary.json").read_text())["final_test_acc"]
    return record["accuracy"]


def markdown(results: dict, args, command: str) -> str:
    from fedrun.rundir.files import git_commit

    rows = ["| clients | tool | whole process (s) | per round, training (s) | per round with evaluation (s) | "
            "final accuracy % | peak memory (MB) |", "|---|---|---|---|---|---|---|"]
    ratios = ["| clients | whole process | per round, training | per round with evaluation | accuracy (fedrun - "
              "FL-bench, points) |", "|---|---|---|---|---|"]
    for clients, tools in results.items():
        medians = {}
        for tool, records in tools.items():
            m = {"whole": statistics.median(r["whole_s"] for r in records),
                 "train": statistics.median(statistics.mean(r["train"]) for r in records),
                 "with_eval": statistics.median(statistics.mean(t + e for t, e in zip(r["train"], r["eval"]))
                                                for r in records),
                 "acc": 100 * statistics.mean(r["acc"] for r in records),
                 "peak": max(r["peak_mb"] or 0 for r in records)}
            medians[tool] = m
            rows.append(f"| {clients} | {tool} | {m['whole']:.1f} | {m['train']:.3f} | {m['with_eval']:.3f} | "
                        f"{m['acc']:.2f} | {m['peak']:.0f} |")
        f, p = medians["fedrun"], medians["FL-bench"]
        ratios.append(f"| {clients} | {p['whole'] / f['whole']:.2f}x | {p['train'] / f['train']:.2f}x | "
                      f"{p['with_eval'] / f['with_eval']:.2f}x | {f['acc'] - p['acc']:+.2f} |")
    return (f"# fedrun against FL-bench on FL-bench's FedAvg workload (issue #27)\n\n"
            f"Made by `{command}` at fedrun commit {git_commit(REPO)} on {time.strftime('%Y-%m-%d')}, FL-bench "
            f"checkout {args.flbench_commit}, on {os.cpu_count()} cores, every process on one thread; {args.pairs} "
            f"interleaved pair(s) per client count (medians; accuracy the mean), seeds 0..{args.pairs - 1}, "
            f"{args.rounds} rounds; load average {os.getloadavg()[0]:.1f} at the end. FedProx synthetic(1, 1) from "
            f"FL-bench's generator, its 2NN, E = {E}, B = {B}, lr {LR}, {FRACTION:.0%} of the clients per round on "
            "fedrun's sampling sequence (both tools), the global model evaluated on every client's test split "
            "after every round. FL-bench ran with its 1/255 rescaling of inputs above 1 switched off (it stalls "
            "synthetic runs) and its clients' own evaluation off; see scripts/bench/peer_bench.py.\n\n"
            + "\n".join(rows) + "\n\nFL-bench's time over fedrun's (above 1: fedrun is faster):\n\n"
            + "\n".join(ratios) + "\n")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--worker"]:
        {"fedrun": fedrun_worker, "flbench": flbench_worker}[argv[1]](argv[2:])
        return 0
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--flbench", required=True, type=Path, help="a checkout of FL-bench")
    parser.add_argument("--flbench-python", default=sys.executable, help="an interpreter with FL-bench's packages")
    parser.add_argument("--clients", default="20,200,1000")
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--pairs", type=int, default=1, help="interleaved pairs (seeds 0..P-1) per client count")
    parser.add_argument("--out", default=None, help="write the table here (Markdown)")
    args = parser.parse_args(argv)
    if not (args.flbench / "generate_data.py").exists() or not (args.flbench / "src" / "server" / "fedavg.py").exists():
        parser.error(f"--flbench {args.flbench}: no FL-bench checkout there. Get one with `git clone "
                     f"https://github.com/KarhouTam/FL-bench {args.flbench}` where GitHub can be reached, and copy it "
                     "here; see this script's --help for its packages")
    args.flbench = args.flbench.resolve()
    git = subprocess.run(["git", "-C", str(args.flbench), "rev-parse", "--short", "HEAD"], capture_output=True,
                         text=True)
    args.flbench_commit = git.stdout.strip() or "(not a git checkout)"
    results: dict[int, dict[str, list[dict]]] = {}
    with tempfile.TemporaryDirectory() as work:
        work = Path(work)
        for clients in (int(c) for c in args.clients.split(",")):
            root = work / f"data{clients}"
            features, classes = as_leaf_json(generate(args.flbench, args.flbench_python, clients), root)
            warm_cache(root, features, classes)
            results[clients] = {"fedrun": [], "FL-bench": []}
            for seed in range(args.pairs):
                stream_file = work / f"stream{clients}_{seed}.json"
                stream_file.write_text(json.dumps(sampling_stream(clients, args.rounds, seed)))
                out = work / f"run{clients}_{seed}"
                cmds = commands(args.flbench, args.flbench_python, clients, args.rounds, seed, root, out,
                                stream_file, features, classes)
                order = list(cmds) if seed % 2 == 0 else list(cmds)[::-1]
                for tool in order:
                    cmd, cwd, env = cmds[tool]
                    record = run_tool(cmd, cwd, env)
                    record["acc"] = final_accuracy(tool, record, out)
                    results[clients][tool].append(record)
                    print(f"{clients} clients, seed {seed}, {tool}: {record['whole_s']:.1f} s whole, "
                          f"{statistics.mean(record['train']):.3f} s/round training, accuracy {record['acc']:.4f}",
                          flush=True)
    command = "python scripts/bench/peer_bench.py " + " ".join(argv)
    text = markdown(results, args, command)
    print(text)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
