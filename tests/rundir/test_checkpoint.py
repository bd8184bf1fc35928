"""Checkpoints and resumption: a run killed at any round and resumed ends with the metrics.csv of an uninterrupted
run; checkpoints are written atomically and an unreadable one falls back to the one before it; SIGTERM checkpoints."""

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
import torch

import fedrun.engine.run.experiment
import fedrun.rundir.files
from fedrun.algorithms import PARTS
from fedrun.rundir.checkpoint import checkpoints, load_latest, save_checkpoint
from fedrun.engine.run.experiment import run_experiment
from fedrun.errors import ConfigError
from fedrun.papers.table_summary import provenance
from fedrun.rundir.files import cpu_model, finished_summary

ALGOS = {
    "fedavg": ["algo=fedavg"],
    "scaffold": ["algo=scaffold"],
    "bherd": ["algo=bherd"],
    "dgt": ["algo=fedavg", "algo/harmonizer=dgt"],
    "gift": ["algo=fedavg", "algo/schedule=gift", "algo.schedule.tau0=6", "algo.schedule.patience=1"],
    "grab": ["algo=grab_fedavg"],
    "mafsvrg": ["algo=mafsvrg", "model=logreg", "algo.bank.threshold=1", "algo.bank.models=2"],
}
BASE = ["data=digits", "model=mlp", "fl.num_clients=8", "fl.clients_per_round=4", "fl.batch_size=16", "fl.lr=0.05",
        "checkpoint.every=2"]


class NeedsCode:
    pass


def same(a, b) -> bool:
    """Equal nested containers of tensors (bit for bit) and plain values."""
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b)
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(map(same, a, b))
    return type(a) is type(b) and a == b


def metrics(run_dir: Path) -> pd.DataFrame:
    """metrics.csv without the wall-clock columns (the run's and a bank's server time), the one thing that differs
    between identical runs."""
    table = pd.read_csv(run_dir / "metrics.csv")
    return table.drop(columns=[c for c in ("elapsed_s", "server_s") if c in table])


def start_cli(run_dir: Path, overrides: list[str]) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "fedrun.cli", *overrides, f"hydra.run.dir={run_dir}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def wait_for_rows(proc: subprocess.Popen, run_dir: Path, rows: int, timeout: float = 120.0) -> None:
    """Block until the run has written ``rows`` metrics rows (or ended)."""
    path, deadline = run_dir / "metrics.csv", time.time() + timeout
    while time.time() < deadline and proc.poll() is None:
        if path.exists() and path.read_text().count("\n") > rows:
            return
        time.sleep(0.002)


# Killed and resumed: every stateful part at least once, several in one run where they combine (SCAFFOLD's client
# states, BHerd's herding, DGT's baselines, GIFT's schedule); GraB's balancing and the MA bank each alone. One run per
# algorithm, FedAvg and each of those parts alone, are among the slow tests.
KILLED = [
    pytest.param(["algo=bherd_scaffold", "algo/harmonizer=dgt", "algo/schedule=gift", "algo.schedule.tau0=6",
                  "algo.schedule.patience=1"], id="scaffold+herd+dgt+gift"),
    pytest.param(ALGOS["grab"], id="grab"),
    pytest.param(ALGOS["mafsvrg"], id="mafsvrg"),
    *[pytest.param(ALGOS[algo], id=algo, marks=pytest.mark.slow) for algo in ("fedavg", "scaffold", "bherd", "dgt",
                                                                             "gift")],
]


@pytest.mark.parametrize("parts", KILLED)
def test_a_run_killed_at_some_round_and_resumed_matches_the_uninterrupted_run(tmp_path, cfg_factory, parts):
    """SIGKILL after 5 rounds (checkpoints every 2), then resume=true: the metrics of the run never killed. 16 rounds:
    the kill comes while most of them are still ahead."""
    overrides = [*BASE, "fl.rounds=16", *parts]
    reference = run_experiment(cfg_factory(*overrides), tmp_path / "reference")
    run_dir = tmp_path / "killed"
    proc = start_cli(run_dir, overrides)
    wait_for_rows(proc, run_dir, rows=5)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL, f"the run ended before it could be killed: {proc.stderr.read()}"
    killed_rows = len(pd.read_csv(run_dir / "metrics.csv"))
    assert killed_rows < 16
    summary = run_experiment(cfg_factory(*overrides, "resume=true"), run_dir)
    assert summary["resumed_from_round"] % 2 == 0 and summary["resumed_from_round"] <= killed_rows
    pd.testing.assert_frame_equal(metrics(run_dir), metrics(tmp_path / "reference"))
    assert summary["final_test_acc"] == reference["final_test_acc"]


def test_checkpoints_are_atomic_and_an_unreadable_newest_falls_back_to_the_previous(tmp_path, cfg_factory):
    overrides = [*BASE, "fl.rounds=7", *ALGOS["scaffold"]]
    run_experiment(cfg_factory(*overrides), tmp_path / "reference")
    run_dir = tmp_path / "run"
    run_experiment(cfg_factory(*overrides), run_dir)
    kept = checkpoints(run_dir)
    assert [p.name for p in kept] == ["checkpoint_0000007.pt", "checkpoint_0000006.pt"]  # keep=2, the last round too
    assert not list(run_dir.glob("*.tmp"))
    newest = kept[0]
    newest.write_bytes(newest.read_bytes()[: newest.stat().st_size // 2])  # a write cut short
    assert load_latest(run_dir)["round"] == 6
    (run_dir / "summary.json").unlink()
    summary = run_experiment(cfg_factory(*overrides, "resume=true"), run_dir)
    assert summary["resumed_from_round"] == 6 and summary["status"] == "finished"
    pd.testing.assert_frame_equal(metrics(run_dir), metrics(tmp_path / "reference"))


def test_a_checkpoint_holds_only_plain_data(tmp_path):
    save_checkpoint(tmp_path, 3, {"round": 3, "x": torch.ones(2), "parts": {"dgt": {"baselines": {4: 0.5}}}})
    save_checkpoint(tmp_path, 5, {"round": 5, "obj": NeedsCode()})  # would need this module's code to rebuild
    assert load_latest(tmp_path)["round"] == 3  # round 5 refused by weights_only, round 3 used
    assert load_latest(tmp_path)["parts"]["dgt"]["baselines"] == {4: 0.5}


def test_sigterm_writes_a_checkpoint_and_the_run_resumes_from_it(tmp_path, cfg_factory):
    overrides = [*BASE, "fl.rounds=30", "checkpoint.every=0", *ALGOS["dgt"]]
    run_dir = tmp_path / "run"
    proc = start_cli(run_dir, overrides)
    wait_for_rows(proc, run_dir, rows=3)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signal.SIGTERM, err[-2000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "interrupted" and "Traceback" not in err
    said = "".join(p.read_text() for p in run_dir.glob("*.log"))  # Hydra's log file of the run
    assert "signal 15: the run stops after this round and writes a checkpoint\n" in said  # a scheduler's: no Ctrl-C
    assert load_latest(run_dir)["round"] == summary["rounds_completed"] < 30
    run_experiment(cfg_factory(*overrides, "resume=true"), run_dir)
    run_experiment(cfg_factory(*overrides), tmp_path / "reference")
    pd.testing.assert_frame_equal(metrics(run_dir), metrics(tmp_path / "reference"))


@pytest.mark.parametrize("algo", ["fedavg", "dgt", "gift"])
def test_a_finished_run_extended_to_more_rounds_matches_the_longer_run(tmp_path, cfg_factory, algo):
    """Resuming a finished 7-round run with fl.rounds=12 continues from its last round's checkpoint; the row the short
    run wrote only because it ended at round 7 (eval.every=3) is dropped, so metrics.csv is the 12-round run's."""
    overrides = [*BASE, "eval.every=3", *ALGOS[algo]]
    reference = run_experiment(cfg_factory(*overrides, "fl.rounds=12"), tmp_path / "reference")
    run_experiment(cfg_factory(*overrides, "fl.rounds=7"), tmp_path / "run")
    assert list(pd.read_csv(tmp_path / "run" / "metrics.csv")["round"]) == [3, 6, 7]
    summary = run_experiment(cfg_factory(*overrides, "fl.rounds=12", "resume=true"), tmp_path / "run")
    assert summary["resumed_from_round"] == 7 and summary["extended_from_rounds"] == 7
    pd.testing.assert_frame_equal(metrics(tmp_path / "run"), metrics(tmp_path / "reference"))
    assert summary["final_test_acc"] == reference["final_test_acc"]
    again = run_experiment(cfg_factory(*overrides, "fl.rounds=12", "resume=true"), tmp_path / "run")  # nothing left
    assert again["resumed_from_round"] == 12 and "extended_from_rounds" not in again
    pd.testing.assert_frame_equal(metrics(tmp_path / "run"), metrics(tmp_path / "reference"))


def test_a_resumed_runs_summary_names_every_commit_that_computed_it_and_their_time(tmp_path, cfg_factory,
                                                                                    monkeypatch):
    """A run extended at another commit, on another machine, names both of each (results tables cite them); its total
    wall time adds the earlier rounds' time. Checkpoints written before they recorded commits and machines take them
    from the run's summary.json."""
    def run(commit: str, rounds: int, run_dir: Path, *extra: str) -> dict:
        monkeypatch.setattr(fedrun.rundir.files, "git_commit", lambda: commit)
        monkeypatch.setattr(fedrun.engine.run.experiment, "device_name", lambda device: f"box-{commit}")
        return run_experiment(cfg_factory(*BASE, f"fl.rounds={rounds}", *extra), run_dir)

    first = run("aaa", 5, tmp_path / "new")
    assert load_latest(tmp_path / "new")["commits"] == ["aaa"] and "git_commits" not in first
    assert first["machine"] == "box-aaa" and "machines" not in first
    extended = run("bbb", 8, tmp_path / "new", "resume=true")
    assert extended["git_commit"] == "bbb" and extended["git_commits"] == ["aaa", "bbb"]
    assert extended["machine"] == "box-bbb" and extended["machines"] == ["box-aaa", "box-bbb"]
    assert extended["wall_time_s"] < extended["total_wall_time_s"] <= extended["wall_time_s"] + first["wall_time_s"]
    assert load_latest(tmp_path / "new")["commits"] == ["aaa", "bbb"]
    again = run("bbb", 8, tmp_path / "new", "resume=true")  # nothing left to run: the same commits, once each
    assert again["git_commits"] == ["aaa", "bbb"] and again["total_wall_time_s"] >= extended["total_wall_time_s"]
    assert again["machines"] == ["box-aaa", "box-bbb"]

    run("aaa", 5, tmp_path / "old")
    latest = checkpoints(tmp_path / "old")[0]
    state = torch.load(latest, weights_only=True)
    del state["commits"], state["wall_time_s"], state["machines"]  # as written before checkpoints recorded them
    torch.save(state, latest)
    old = run("bbb", 8, tmp_path / "old", "resume=true")
    assert old["git_commits"] == ["aaa", "bbb"] and "total_wall_time_s" not in old
    assert old["machines"] == ["box-aaa", "box-bbb"]  # the earlier machine from the run's summary.json
    line = provenance("cmd", [extended, old])
    assert "made at commit aaa, bbb;" in line and line.endswith(" on box-aaa, box-bbb.")
    assert f"compute time {extended['total_wall_time_s'] + old['wall_time_s']:.0f} s (not counting the rounds before " \
           "the resumption of 1 run(s)" in line
    # a run made before runs recorded their machine: counted, beside the machine that makes the table
    older = {k: v for k, v in first.items() if k != "machine"}
    assert "on box-aaa, box-bbb; where 1 of the runs ran is not recorded (this table was made on " in \
        provenance("cmd", [extended, older])
    assert f"s; where the runs ran is not recorded (this table was made on {cpu_model()}, {os.cpu_count()} cores)." \
        in provenance("cmd", [older]), "the machine's cores: the rendering process's threads say nothing of the runs"


def test_an_extension_killed_midway_is_not_taken_for_a_finished_run(tmp_path, cfg_factory):
    """SIGKILL leaves no summary of its own: the folder must not keep the short run's "finished" beside the longer
    run's config.yaml, or scripts and sweeps would skip the job as done. Resuming then completes it."""
    run_dir, longer = tmp_path / "run", [*BASE, "fl.rounds=16", "resume=true"]  # killed after 7: 9 still ahead
    run_experiment(cfg_factory(*BASE, "fl.rounds=5"), run_dir)
    proc = start_cli(run_dir, longer)
    wait_for_rows(proc, run_dir, rows=7)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL, f"the extension ended before it could be killed: {proc.stderr.read()}"
    assert finished_summary(run_dir, cfg_factory(*longer)) is None
    summary = run_experiment(cfg_factory(*longer), run_dir)
    assert summary["status"] == "finished" and summary["rounds_completed"] == 16
    run_experiment(cfg_factory(*BASE, "fl.rounds=16"), tmp_path / "reference")
    pd.testing.assert_frame_equal(metrics(run_dir), metrics(tmp_path / "reference"))


def test_resume_refuses_a_checkpoint_past_the_rounds_asked(tmp_path, cfg_factory):
    run_experiment(cfg_factory(*BASE, "fl.rounds=5"), tmp_path)
    with pytest.raises(ConfigError, match=r"of round 5, past fl.rounds=3\. Fix: fl.rounds=5"):
        run_experiment(cfg_factory(*BASE, "fl.rounds=3", "resume=true"), tmp_path)
    assert len(pd.read_csv(tmp_path / "metrics.csv")) == 5  # refused before anything was touched


def test_resume_refuses_a_checkpoint_of_another_experiment(tmp_path, cfg_factory):
    run_experiment(cfg_factory(*BASE, "fl.rounds=3"), tmp_path)
    with pytest.raises(ConfigError, match=r"different experiment: fl.lr: 0.05 there, 0.2 asked\. Fix"):
        run_experiment(cfg_factory(*BASE, "fl.rounds=3", "fl.lr=0.2", "resume=true"), tmp_path)
    assert os.path.exists(tmp_path / "checkpoint_0000002.pt")  # refused before anything was touched


def test_resume_accepts_a_run_made_before_a_setting_existed(tmp_path, cfg_factory, monkeypatch):
    """A setting fedrun adds after a run was made changes the config's fingerprint but nothing the run computed."""
    run_experiment(cfg_factory(*BASE, "fl.rounds=3"), tmp_path)
    import fedrun.rundir.checkpoint

    real = fedrun.rundir.checkpoint.config_fingerprint
    monkeypatch.setattr(fedrun.rundir.checkpoint, "config_fingerprint",
                        lambda cfg, rounds=None: "new" + real(cfg, rounds))
    summary = run_experiment(cfg_factory(*BASE, "fl.rounds=5", "resume=true"), tmp_path)
    assert summary["status"] == "finished" and summary["extended_from_rounds"] == 3


# killed in the default suite (the state a crash leaves: a summary still "running"), the other two among the slow tests
@pytest.mark.parametrize("how", [pytest.param("interrupted", marks=pytest.mark.slow), "killed",
                                 pytest.param("finished", marks=pytest.mark.slow)])
def test_rerunning_a_run_directory_without_resume_refuses_and_overwrite_keeps_the_old_files(tmp_path, how):
    from conftest import run_cli

    overrides = [*BASE, "fl.rounds=30", "checkpoint.every=1", "progress=false"]
    run_dir = tmp_path / "run"
    if how == "finished":
        run_cli(*overrides, "fl.rounds=3", f"hydra.run.dir={run_dir}", cwd=tmp_path)
    else:
        proc = start_cli(run_dir, overrides)
        wait_for_rows(proc, run_dir, rows=3)
        proc.send_signal(signal.SIGTERM if how == "interrupted" else signal.SIGKILL)
        proc.communicate(timeout=120)
    before = {p.name: p.read_bytes() for p in run_dir.iterdir() if p.is_file() and p.suffix != ".log"}
    status = json.loads(before["summary.json"])["status"]
    assert status == {"interrupted": "interrupted", "killed": "running", "finished": "finished"}[how]
    again = run_cli(*overrides, f"hydra.run.dir={run_dir}", cwd=tmp_path, check=False)
    assert again.returncode == 2, again.stderr[-2000:]
    assert "resume=true" in again.stderr and "overwrite=true" in again.stderr and "Traceback" not in again.stderr
    after = {p.name: p.read_bytes() for p in run_dir.iterdir() if p.is_file() and p.suffix != ".log"}
    assert after == before, "every file left in place"
    run_cli(*overrides, "fl.rounds=2", "overwrite=true", f"hydra.run.dir={run_dir}", cwd=tmp_path)
    assert json.loads((run_dir / "summary.json").read_text())["rounds_completed"] == 2
    (aside,) = tmp_path.glob("run.previous-*")
    kept = {p.name: p.read_bytes() for p in aside.iterdir() if p.is_file()}
    assert kept == before, "the earlier run's files, moved aside unchanged"


def test_sigterm_stops_a_sweep_and_resubmitting_with_resume_finishes_it(tmp_path):
    sweep = tmp_path / "sweep"
    # 12 rounds: the signal comes after 3, while the first job still has most of its rounds ahead
    args = [*BASE, "fl.rounds=12", "checkpoint.every=0", "seed=0,1,2", f"hydra.sweep.dir={sweep}"]
    proc = subprocess.Popen([sys.executable, "-m", "fedrun.cli", "--multirun", *args], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    wait_for_rows(proc, sweep / "0", rows=3)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signal.SIGTERM, err[-2000:]
    assert json.loads((sweep / "0" / "summary.json").read_text())["status"] == "interrupted"
    assert not (sweep / "1" / "summary.json").exists()  # the sweep stopped with its first job
    done = subprocess.run([sys.executable, "-m", "fedrun.cli", "--multirun", *args, "resume=true"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    summaries = [json.loads((sweep / str(j) / "summary.json").read_text()) for j in range(3)]
    assert [s["status"] for s in summaries] == ["finished"] * 3 and summaries[0]["resumed_from_round"] >= 1


STATEFUL = {  # a setting per stateful part, and the overrides that make its state change within five rounds
    "grab": ["algo=grab_fedavg"],
    "dgt": ["algo=fedavg", "algo/harmonizer=dgt"],
    "fixed": ["algo.schedule.tau=3", "algo.schedule.switch_round=2", "algo.schedule.switch_tau=1"],
    "gift": ["algo/schedule=gift", "algo.schedule.tau0=6", "algo.schedule.patience=1"],
    "adacomm": ["algo/schedule=adacomm", "algo.schedule.tau0=6"],
    "afl": ["algo/schedule=afl", "timing=simulated", "timing.step_time_s=0.01", "timing.budget_s=100"],
    "mafsvrg": ["algo=mafsvrg", "model=logreg", "algo.bank.threshold=1", "algo.bank.models=2"],
}


PART_OF = {"grab": "step_selector", "dgt": "harmonizer", "fixed": "schedule", "gift": "schedule", "adacomm": "schedule",
           "afl": "schedule", "mafsvrg": "bank"}


@pytest.mark.parametrize("case", sorted(STATEFUL))
def test_rounds_change_a_parts_state_never_its_settings_and_a_checkpoint_restores_it(cfg_factory, case):
    """What rounds change is in the ServerState (explicit state): the parts' attributes, their settings, stay as
    built; the state a checkpoint saves, loaded into a fresh simulation, is the state it was; and the checkpoint
    format before ServerState (``server_state``, ``rule_state``, ``client_states``, ``parts``) and one written before
    ``selector`` was renamed ``step_selector`` load to the same."""
    from fedrun.engine.run.simulation import Simulation

    cfg = cfg_factory(*BASE[:-1], *STATEFUL[case])
    sim = Simulation.from_config(cfg)
    settings = {part: repr(vars(getattr(sim.algo, part))) for part in PARTS}
    initial = repr(getattr(sim.state, PART_OF[case]))
    for rnd in range(1, 6):
        sim.run_round(rnd)
    assert {part: repr(vars(getattr(sim.algo, part))) for part in PARTS} == settings, "a round changed a setting"
    assert repr(getattr(sim.state, PART_OF[case])) != initial, "the case makes its part's state change"
    saved = sim.state_dict()
    old_format = {"params": saved["state"]["params"], "buffers": saved["state"]["buffers"],
                  "server_state": saved["state"]["server_opt"], "rule_state": saved["state"]["local"],
                  "client_states": saved["state"]["clients"], "sim_time": saved["state"]["sim_time"],
                  "parts": {"selector": saved["state"]["step_selector"],
                            **{part: saved["state"][part] for part in ("harmonizer", "schedule", "bank")}},
                  "torch_rng": saved["torch_rng"], "cuda_rng": saved["cuda_rng"]}
    before_rename = {**saved, "state": {("selector" if k == "step_selector" else k): v
                                        for k, v in saved["state"].items()}}
    for checkpoint in (saved, old_format, before_rename):
        again = Simulation.from_config(cfg)
        again.load_state_dict(checkpoint)
        assert same(vars(again.state), vars(sim.state))


def test_a_checkpoint_of_an_unknown_format_is_refused_with_a_message(cfg_factory):
    from fedrun.engine.run.simulation import Simulation

    sim = Simulation.from_config(cfg_factory(*BASE[:-1]))
    with pytest.raises(ConfigError, match="start the run in a new directory"):
        sim.load_state_dict({"weights": torch.zeros(3), "torch_rng": torch.get_rng_state(), "cuda_rng": []})


def test_a_resumed_run_takes_execution_settings_from_its_config_not_the_checkpoint(cfg_factory):
    from fedrun.engine.run.simulation import Simulation

    base = [*BASE[:-1], "algo=bherd", "hardware.step_store=host"]
    first = Simulation.from_config(cfg_factory(*base, "hardware.gram_block=7"))
    first.run_round(1)
    again = Simulation.from_config(cfg_factory(*base, "hardware.gram_block=5"))
    again.load_state_dict(first.state_dict())
    assert again.gram_block == 5
