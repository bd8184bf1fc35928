"""One run over torch.distributed ranks (torchrun, gloo on the CPU): each rank trains its share of a round's clients
and every rank holds the whole round, so two ranks compute what one process computes, bit for bit in float64 with
the loop executor and the updates exchanged as rows, for every family, and to float rounding with their weighted sums
all-reduced; rank 0 alone writes; a run killed on two ranks resumes on one; settings that two
ranks cannot run are refused before any work; a sweep's jobs run over their launcher's tasks."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from fedrun.config.compose import compose_config
from fedrun.engine.execution.ranks import Ranks, check_ranks
from conftest import REPO

BASE = ["data=digits", "model=mlp", "fl.num_clients=8", "fl.clients_per_round=5", "fl.batch_size=16", "fl.lr=0.05",
        "fl.rounds=4", "hardware.dtype=float64", "hardware.executor=loop", "hardware.exchange=rows", "progress=false"]
FAMILIES = {
    "fedavg": ["algo=fedavg"],
    "scaffold": ["algo=scaffold"],
    "fedgh": ["algo=fedgh"],
    "dgt": ["algo=dgt"],
    "bherd": ["algo=bherd"],
    "gift": ["algo=gift", "algo.schedule.tau0=6", "algo.schedule.patience=1"],
    "mafsvrg": ["algo=mafsvrg", "model=logreg", "algo.bank.threshold=1", "algo.bank.models=2"],
    "gafsvrg": ["algo=gafsvrg", "model=logreg", "algo.bank.threshold=1", "algo.bank.models=2"],
}
WORKER = """
import json, sys
import torch
from fedrun.config.compose import compose_config
from fedrun.engine.run.experiment import run_experiment
from fedrun.engine.execution.ranks import start

for name, overrides in json.loads(sys.argv[1]).items():
    cfg = compose_config(overrides)
    run_experiment(cfg, f"{sys.argv[2]}/{name}", ranks=start(cfg))
if torch.distributed.is_initialized():  # no rank tears its connections down while another still reads from them
    torch.distributed.barrier()
    torch.distributed.destroy_process_group()
"""


def torchrun(ranks: int, *args: str) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(ranks), *args]


def kill_ranks(proc: subprocess.Popen) -> None:
    """SIGKILL torchrun's workers, then torchrun, and wait until they are gone: the ranks die as a node's would. (A
    signal to torchrun's process group misses them: each worker has a session of its own.)"""
    workers = [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit() and _parent(p) == proc.pid]
    assert workers, "torchrun has no workers to kill"
    for pid in workers:
        os.kill(pid, signal.SIGKILL)
    proc.kill()
    proc.wait()
    deadline = time.time() + 30
    while time.time() < deadline and any(_parent(Path(f"/proc/{pid}")) is not None for pid in workers):
        time.sleep(0.05)


def _parent(proc_dir: Path) -> int | None:
    """The parent pid of a live process (None once it is gone or a zombie)."""
    try:
        fields = (proc_dir / "stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return None if fields[0] == "Z" else int(fields[1])


def environment() -> dict:
    return {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}


def metrics(run_dir: Path) -> pd.DataFrame:
    table = pd.read_csv(run_dir / "metrics.csv", dtype=str)
    return table.drop(columns=[c for c in ("elapsed_s", "server_s") if c in table])


def test_clients_are_placed_by_their_steps_longest_first_and_every_one_once():
    shares = Ranks(0, 2).shares([5, 1, 1, 1, 4, 2])
    # longest first to the least-loaded rank: 5 -> 0, 4 -> 1, 2 -> 1 (4 < 5), then the 1s to 0, 0 (a tie), 1
    assert shares == [[0, 1, 2], [3, 4, 5]]  # 7 steps each
    assert sorted(i for s in Ranks(1, 3).shares([3] * 7) for i in s) == list(range(7))
    assert Ranks(0, 3).shares([2, 2, 2]) == [[0], [1], [2]] and Ranks(0, 1).shares([4, 1]) == [[0, 1]]


# the families whose server reads the updates only as weighted sums, which ranks can all-reduce (and BHerd and FedGH)
SUMMED = {"fedavg": ["algo=fedavg"], "fednova": ["algo=fednova"], "scaffold": ["algo=scaffold"],
          "feddyn": ["algo=feddyn"], "bherd": ["algo=bherd"], "fedgh": ["algo=fedgh"]}


def run_worker(command: list[str], runs: dict[str, list[str]], folder: Path) -> Path:
    """The worker script over ``runs`` (name -> overrides), as one process or under torchrun (each process with one
    thread: a product's sums split over threads would differ in rounding); each run's files in folder/<name>."""
    script = folder.parent / "worker.py"
    script.write_text(WORKER)
    proc = subprocess.run([*command, str(script), json.dumps(runs), str(folder)], env=environment(),
                          capture_output=True, text=True, timeout=600, cwd=folder.parent)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return folder


@pytest.fixture(scope="module")
def one_process(tmp_path_factory) -> Path:
    """Every family's run as one process, the updates exchanged as rows: what the ranks must compute."""
    runs = {family: BASE + overrides for family, overrides in {**FAMILIES, **SUMMED}.items()}
    return run_worker([sys.executable], runs, tmp_path_factory.mktemp("ranks") / "one")


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory) -> Path:
    """The same runs over two ranks exchanging rows."""
    runs = {family: BASE + overrides for family, overrides in FAMILIES.items()}
    return run_worker(torchrun(2), runs, tmp_path_factory.mktemp("ranks") / "two")


def test_two_ranks_compute_what_one_process_computes_for_every_family(one_process, two_ranks):
    for family in FAMILIES:
        one, two = (json.loads((how / family / "summary.json").read_text()) for how in (one_process, two_ranks))
        assert two["ranks"] == 2 and one["ranks"] == 1
        pd.testing.assert_frame_equal(metrics(two_ranks / family), metrics(one_process / family), obj=family)
        assert two["final_test_acc"] == one["final_test_acc"], family
    exchanged = {family: json.loads((two_ranks / family / "summary.json").read_text())["exchange_mb"]
                 for family in ("fedavg", "bherd")}
    # BHerd's ranks exchange what each client's selection made (the update it sends and g_i), not its steps
    assert 2 * exchanged["fedavg"] < exchanged["bherd"] < 4 * exchanged["fedavg"]


def test_ranks_that_all_reduce_the_updates_sums_compute_one_process_result_to_rounding(tmp_path, one_process,
                                                                                        two_ranks):
    """``hardware.exchange=sums``: where the server reads the updates only as weighted sums (FedAvg's and FedNova's
    means, SCAFFOLD's and FedDyn's), each rank's partial sum is all-reduced. The sums are added in another order than
    one process's product, so the models agree to float64 rounding, and each rank receives d numbers per sum instead
    of the other rank's updates; BHerd's server reads only what each client's selection made, which its rank sends;
    a part that reads each update (FedGH) still gets the rows, bit for bit."""
    summed = run_worker(torchrun(2), {f: BASE + o + ["hardware.exchange=sums"] for f, o in SUMMED.items()},
                        tmp_path / "sums")
    for family in SUMMED:
        one, two = (pd.read_csv(how / family / "metrics.csv") for how in (one_process, summed))
        for column in ("train_loss", "test_loss", "test_acc"):
            assert ((two[column] - one[column]).abs() <= 1e-12 * one[column].abs().clip(lower=1)).all(), (family,
                                                                                                           column)
    pd.testing.assert_frame_equal(metrics(summed / "fedgh"), metrics(one_process / "fedgh"))
    how = {f: json.loads((summed / f / "summary.json").read_text())["exchange"] for f in SUMMED}
    assert how == {**{f: "sums" for f in SUMMED}, "fedgh": "rows"}
    sums, rows = (json.loads((folder / "fedavg" / "summary.json").read_text()) for folder in (summed, two_ranks))
    d, rounds = sums["num_parameters"], len(pd.read_csv(summed / "fedavg" / "metrics.csv"))
    # a ring all-reduce of d float64 numbers per round moves 2 (R - 1) / R of them through each rank: d here
    assert sums["exchange_mb"] * 2**20 / (rounds * 8) == pytest.approx(d, rel=0.01)
    assert rows["exchange_mb"] > 1.5 * sums["exchange_mb"], "two of five clients' rows are more than one sum"


def test_a_signal_to_one_rank_stops_every_rank_after_the_round_with_a_checkpoint(tmp_path):
    """SIGTERM to rank 1 alone (a scheduler's preemption reaches one process first): every rank stops after the same
    round, and rank 0 writes the checkpoint and an interrupted summary (the killed test below resumes such a run)."""
    overrides = [*BASE, "fl.rounds=400"]
    run_dir = tmp_path / "stopped"
    proc = subprocess.Popen(torchrun(2, "-m", "fedrun", *overrides, f"hydra.run.dir={run_dir}"), env=environment(),
                            cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.time() + 120
    while time.time() < deadline and not ((run_dir / "metrics.csv").exists()
                                          and (run_dir / "metrics.csv").read_text().count("\n") > 3):
        time.sleep(0.01)
    rank1 = [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit() and _parent(p) == proc.pid
             and b"RANK=1\x00" in (p / "environ").read_bytes().replace(b"LOCAL_RANK", b"LOCAL_")]
    assert len(rank1) == 1, "torchrun's rank 1 not found"
    os.kill(rank1[0], signal.SIGTERM)
    proc.wait(timeout=120)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "interrupted" and summary["signal"] == signal.SIGTERM
    done = summary["rounds_completed"]
    assert done < 400 and len(pd.read_csv(run_dir / "metrics.csv")) == done
    assert list(run_dir.glob("checkpoint*")), "rank 0 wrote no checkpoint"


@pytest.mark.slow  # two runs and a torchrun; resuming itself is tested in test_checkpoint.py
def test_a_run_killed_on_two_ranks_resumes_on_one(tmp_path):
    """torchrun's ranks killed mid-run (SIGKILL, no checkpoint of their own at that moment): the run resumed by one
    process from rank 0's last checkpoint ends with the uninterrupted run's metrics (every process one thread)."""
    overrides = [*BASE, "fl.rounds=16", "checkpoint.every=2", "algo=scaffold"]
    subprocess.run([sys.executable, "-m", "fedrun", *overrides, f"hydra.run.dir={tmp_path / 'reference'}"],
                   env=environment(), cwd=tmp_path, check=True, capture_output=True, timeout=300)
    run_dir = tmp_path / "killed"
    proc = subprocess.Popen(torchrun(2, "-m", "fedrun", *overrides, f"hydra.run.dir={run_dir}"), env=environment(),
                            cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.time() + 120
    while time.time() < deadline and proc.poll() is None:
        if (run_dir / "metrics.csv").exists() and (run_dir / "metrics.csv").read_text().count("\n") > 5:
            break
        time.sleep(0.005)
    kill_ranks(proc)
    assert len(pd.read_csv(run_dir / "metrics.csv")) < 16, "the run ended before it could be killed"
    subprocess.run([sys.executable, "-m", "fedrun", *overrides, f"hydra.run.dir={run_dir}", "resume=true"],
                   env=environment(), cwd=tmp_path, check=True, capture_output=True, timeout=300)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["resumed_from_round"] >= 2 and summary["ranks"] == 1
    pd.testing.assert_frame_equal(metrics(run_dir), metrics(tmp_path / "reference"))


@pytest.mark.slow  # four sweeps' worth of processes
def test_a_sweeps_jobs_run_over_their_launchers_tasks(tmp_path):
    """The SLURM launcher with ``tasks_per_node`` (here submitit's local mode, the SLURM path on this machine): each
    job is one run over its tasks as ranks, equal to the same sweep's one-process jobs."""
    sweep = [sys.executable, "-m", "fedrun", "-m", *BASE, "seed=0,1"]
    subprocess.run([*sweep, f"hydra.sweep.dir={tmp_path / 'one'}"], env=environment(), cwd=tmp_path, check=True,
                   capture_output=True, timeout=300)
    subprocess.run([*sweep, "hydra/launcher=slurm_local", "hydra.launcher.tasks_per_node=2",
                    "hydra.launcher.cpus_per_task=1", f"hydra.sweep.dir={tmp_path / 'tasks'}"], env=environment(),
                   cwd=tmp_path, check=True, capture_output=True, timeout=300)
    for job in ("0", "1"):
        assert json.loads((tmp_path / "tasks" / job / "summary.json").read_text())["ranks"] == 2
        pd.testing.assert_frame_equal(metrics(tmp_path / "tasks" / job), metrics(tmp_path / "one" / job), obj=job)


def test_more_ranks_than_clients_or_a_missing_backend_are_refused_before_any_work(tmp_path):
    cfg = compose_config([*BASE, "fl.clients_per_round=2"])
    assert check_ranks(cfg, 2) == []
    (few,) = check_ranks(cfg, 3)
    assert few.startswith("3 ranks for 2 clients per round") and "--nproc-per-node 2" in few
    nccl = compose_config([*BASE, "hardware.backend=nccl"])
    if not __import__("torch").cuda.is_available():
        (missing,) = check_ranks(nccl, 2)
        assert "hardware.backend=nccl: the ranks' backend nccl is not available" in missing
    run_dir = tmp_path / "refused"
    proc = subprocess.run(torchrun(3, "-m", "fedrun", *BASE, "fl.clients_per_round=2", f"hydra.run.dir={run_dir}"),
                          env=environment(), cwd=tmp_path, capture_output=True, text=True, timeout=300)
    # every rank says it (torchrun stops the others once one has exited, so how many got to say it varies)
    assert proc.returncode != 0 and proc.stderr.count("3 ranks for 2 clients per round") >= 1, proc.stderr[-2000:]
    assert not (run_dir / "summary.json").exists() and not (run_dir / "metrics.csv").exists()


def test_what_a_rank_sends_holds_only_its_own_values():
    """A client's state can be a row of its chunk's stacked states: sent as it is, each would be pickled with the
    whole stack (K times the traffic)."""
    import pickle

    import torch

    from fedrun.engine.execution.ranks import _sendable

    store = torch.randn(8, 5, 100)
    sent = _sendable({"steps": [store[i, :3] for i in range(8)], "updates": store[:, 0]})
    assert all(torch.equal(s, store[i, :3]) for i, s in enumerate(sent["steps"]))
    own = (8 * 3 * 100 + 8 * 100) * 4  # bytes of the values sent
    assert len(pickle.dumps(sent)) < 2 * own < len(pickle.dumps([store[i, :3] for i in range(8)]))


def test_a_sweep_under_torchrun_is_refused():
    env = {**environment(), "WORLD_SIZE": "2"}
    proc = subprocess.run([sys.executable, "-m", "fedrun", "-m", "fl.lr=0.1,0.2"], env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 2 and "--multirun under torchrun" in proc.stderr


def test_a_rank_other_than_0_writes_nothing(tmp_path):
    from fedrun.rundir.files import RunDirectory

    for writer, folder in ((True, tmp_path / "rank0"), (False, tmp_path / "rank1")):
        out = RunDirectory(folder, write=writer)
        out.save_config(compose_config(BASE))
        out.save_partition({})
        out.append_metrics({"round": 1})
        out.save_summary({"status": "running"})
        out.close()
        assert sorted(p.name for p in folder.glob("*")) == (
            ["config.yaml", "metrics.csv", "partition.json", "summary.json"] if writer else [])


def test_the_ranks_own_collectives_use_a_tensor_on_the_groups_device(monkeypatch):
    """NCCL all-reduces GPU tensors only: under nccl the ranks' device is this rank's GPU, and the stop request's
    all-reduce (``Ranks.most``) builds its tensor there (a mocked group: no GPU here)."""
    import torch
    import torch.distributed as dist

    from fedrun.engine.execution import ranks as ranks_module

    # rank 0: another rank would set the fedrun logger to warnings for the rest of this process
    for name, value in {"is_initialized": True, "get_rank": 0, "get_world_size": 2, "get_backend": "nccl"}.items():
        monkeypatch.setattr(dist, name, lambda *a, _v=value, **k: _v)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 1)
    monkeypatch.setattr(ranks_module, "launched", lambda: 2)
    monkeypatch.setattr(ranks_module, "check_ranks", lambda cfg, size: [])
    ranks = ranks_module.start(compose_config(BASE))
    assert (ranks.rank, ranks.size, ranks.device) == (0, 2, torch.device("cuda", 1))

    seen = []

    def all_reduce(t, op=None):
        seen.append(t.device)
        t.fill_(7)

    monkeypatch.setattr(dist, "all_reduce", all_reduce)
    gloo = ranks_module.Ranks(0, 2, torch.device("cpu"))
    assert gloo.most(3) == 7 and seen == [torch.device("cpu")]
    with pytest.raises(RuntimeError, match="meta"):  # a meta tensor cannot be read back: only its device is checked
        ranks_module.Ranks(0, 2, torch.device("meta")).most(3)
    assert seen[-1] == torch.device("meta")
