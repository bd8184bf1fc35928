"""What the executor tests share: small data sets, the algorithm families and model families they run, and a
comparison of nested states."""


import numpy as np
import pytest
import torch
from conftest import register_tiny, with_values

from fedrun.engine.run.simulation import Simulation

COMMON = ["partition=dirichlet", "partition.alpha=0.5", "fl.num_clients=8", "fl.clients_per_round=5",
          "fl.batch_size=16", "fl.local_epochs=1", "hardware=cpu", "seed=3"]


def tiny(monkeypatch, kind):
    rng = np.random.default_rng(0)
    n = 240
    y = rng.integers(0, 4, n)
    if kind == "image32":
        x = rng.normal(size=(n, 3, 32, 32))
        return register_tiny(monkeypatch, "tiny", x, y, kind="image")
    if kind == "tokens":
        return register_tiny(monkeypatch, "tiny", rng.integers(0, 50, (n, 12)), y, kind="tokens")
    return register_tiny(monkeypatch, "tiny", rng.normal(size=(n, 10, 6)), y, kind="sequence")


FAMILIES = {
    "linear": (None, ["data=digits", "model=logreg"]),
    # float32 rounding in the convolutions, amplified by momentum over two rounds, reaches 2e-3 with one thread's
    # kernels (the two executors agree to 1e-16 in float64): compared in float64
    "cnn": (None, ["data=digits", "model=cnn3", "fl.momentum=0.9", "hardware.dtype=float64"]),
    # BatchNorm over a few samples at 1x1 spatial size is ill-conditioned in float32 (0.5% gradient noise between
    # two exact orders of summation), so this family is compared in float64, where one round agrees to 1e-12, and in
    # one layout: the loop's channels-last convolutions sum in another order (test_channels_last_images_give_the_
    # contiguous_rounds compares the layouts on a plain CNN). Its training is chaotic (lr 0.1): a second round moves a
    # 1e-12 nudge of the loop's own start past 1e-8 (the test after the next), so each round is compared from the same
    # start
    "batchnorm_cnn": ("image32", ["model=mobilenetv2", "model.width_mult=0.25", "model.dropout=0.0",
                                  "hardware.dtype=float64", "hardware.layout=contiguous"]),
    "gru": ("tokens", ["model=gru", "model.vocab_size=50", "model.embed_dim=8", "model.hidden=8"]),
    "lstm": ("sequence", ["model=lstm", "model.hidden=8"]),
}


def two_rounds(cfg_factory, overrides, executor, data_name=None, **hw):
    cfg = with_values(cfg_factory(*COMMON, *overrides), f"hardware.executor={executor}",
                      *[f"hardware.{k}={v}" for k, v in hw.items()])
    if data_name:
        cfg.data.name = data_name
    sim = Simulation.from_config(cfg)
    outs = [sim.run_round(r) for r in (1, 2)]
    return sim, outs


# Seen on an H100 (torch 2.11), when the second round started from each executor's own first: the MobileNetV2
# family's vmapped rounds left the loop's by up to 1.2e-4 in float64 (0.3% of its parameters; perhaps its chaos, see
# FAMILIES: not yet rechecked there with a shared start), and with hardware.deterministic=true its float64 loop step
# ran for minutes: not explained
BATCHNORM_ON_A_GPU = pytest.mark.xfail(torch.cuda.is_available(), reason="BatchNorm CNN on a GPU: open", strict=False)


LOGREG_BANK = ["model=logreg", "algo.bank.threshold=1", "algo.bank.models=2"]
EVERY_FAMILY = {  # every local rule's hooks, a step selector of each kind, a harmoniser, a schedule, FSVRG and its bank
    **{algo: [f"algo={algo}"] for algo in ("centralized", "fedprox", "scaffold", "feddyn", "fednova", "fedadam",
                                           "feddecorr", "perfedavg", "mimesvrg", "losac", "bherd", "grab_fedavg",
                                           "dgt", "fedgh")},
    "gift": ["algo=gift", "algo.schedule.tau0=3", "algo.schedule.patience=1"],
    "fsvrg": ["algo=fsvrg", "model=logreg"],
    "mafsvrg": ["algo=mafsvrg", *LOGREG_BANK],
    "gafsvrg": ["algo=gafsvrg", *LOGREG_BANK],
}


def assert_close_tree(got, want, where: str = "state", exact: bool = False) -> None:
    """Nested dicts/lists of tensors and plain values equal (tensors to float64 tolerance, or bit for bit)."""
    if isinstance(want, torch.Tensor):
        if exact:
            assert torch.equal(got, want), where
        else:
            torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-8, msg=lambda m: f"{where}: {m}")
    elif isinstance(want, dict):
        assert got.keys() == want.keys(), where
        for key in want:
            assert_close_tree(got[key], want[key], f"{where}.{key}", exact)
    elif isinstance(want, (list, tuple)):
        assert len(got) == len(want), where
        for i, (g, w) in enumerate(zip(got, want)):
            assert_close_tree(g, w, f"{where}[{i}]", exact)
    elif isinstance(want, float) and not exact:
        assert got == pytest.approx(want, rel=1e-6, abs=1e-8), where
    else:
        assert got == want, where
