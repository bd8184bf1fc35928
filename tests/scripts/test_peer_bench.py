"""scripts/bench/peer_bench.py's fedrun side (FL-bench itself is not needed): fedrun reads the very samples FL-bench
generated, client for client, and FL-bench is handed fedrun's client-sampling sequence."""

from __future__ import annotations

import pickle

import numpy as np
import torch
from conftest import load_script

from fedrun.engine.run.simulation import Simulation


def test_fedrun_trains_on_flbenchs_clients_in_its_order_and_samples_as_flbench_is_told(tmp_path, cfg_factory):
    """FL-bench's data/synthetic files (data.npy, targets.npy, partition.pkl with each client's train/val/test
    indices) become LEAF JSON with one user per FL-bench client; fedrun's natural partition then gives client i
    exactly FL-bench client i's training samples, its test set is the clients' test splits, and the sequence
    handed to FL-bench is the cohorts fedrun's rounds train."""
    peer = load_script("peer_bench")
    rng = np.random.default_rng(0)
    source = tmp_path / "synthetic"
    source.mkdir()
    sizes = [12, 30, 7, 21]
    x, y = rng.normal(size=(sum(sizes), 5)) * 3, rng.integers(0, 3, sum(sizes)).astype(np.int32)
    np.save(source / "data.npy", x)
    np.save(source / "targets.npy", y)
    order, parts, start = rng.permutation(sum(sizes)), [], 0
    for n in sizes:
        ix = order[start : start + n].tolist()
        parts.append({"train": ix[: n * 3 // 4], "val": [], "test": ix[n * 3 // 4 :]})
        start += n
    (source / "partition.pkl").write_bytes(pickle.dumps({"separation": None, "data_indices": parts}))
    features, classes = peer.as_leaf_json(source, tmp_path / "root")
    assert (features, classes) == (5, 3)
    sim = Simulation.from_config(cfg_factory("data=leaf_synthetic", "data.source=json",
                                             f"data.root={tmp_path / 'root'}",
                                             "data.num_classes=3", "data.num_dim=5", "partition=natural", "model=mlp",
                                             "fl.num_clients=4", "fl.clients_per_round=2", "hardware.dtype=float64",
                                             "hardware.device=cpu"))  # the peer benchmark's CPU workload
    for client, part in enumerate(parts):
        got = sim.data.x_train[torch.as_tensor(sim.partition.indices[client])]
        torch.testing.assert_close(got, torch.as_tensor(x[part["train"]]))
    test = [i for part in parts for i in part["test"]]
    torch.testing.assert_close(sim.data.x_test, torch.as_tensor(x[test]))
    stream = peer.sampling_stream(40, 3, seed=7)  # FL-bench's join ratio: 10% of the clients
    ten_percent = Simulation.from_config(cfg_factory("data=digits", "model=logreg", "fl.num_clients=40",
                                                     "fl.clients_per_round=4",
                                                     "seed=7"))
    assert stream == [sorted(ten_percent.participants(ten_percent.state, r).ids.tolist()) for r in (1, 2, 3)]
    assert all(len(set(c)) == 4 for c in stream)
