"""The vectorised cohort executor computes what the loop computes."""

import logging
import shutil

import numpy as np
import pytest
import torch
from conftest import register_tiny, with_values

from fedrun.engine.executor import VmapExecutor
from fedrun.engine.simulation import Simulation

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
    sim = Simulation(cfg)
    outs = [sim.run_round(r) for r in (1, 2)]
    return sim, outs


# Seen on an H100 (torch 2.11), when the second round started from each executor's own first: the MobileNetV2
# family's vmapped rounds left the loop's by up to 1.2e-4 in float64 (0.3% of its parameters; perhaps its chaos, see
# FAMILIES: not yet rechecked there with a shared start), and with hardware.deterministic=true its float64 loop step
# ran for minutes: not explained
BATCHNORM_ON_A_GPU = pytest.mark.xfail(torch.cuda.is_available(), reason="BatchNorm CNN on a GPU: open", strict=False)


@pytest.mark.parametrize("family", [pytest.param(f, marks=BATCHNORM_ON_A_GPU) if f == "batchnorm_cnn" else f
                                    for f in FAMILIES])
def test_vmap_round_equals_loop_round(monkeypatch, cfg_factory, family):
    """Two rounds, the second from the loop's state after the first for both executors: each comparison is one
    round's arithmetic, not how a chaotic training amplifies the first round's float rounding."""
    kind, overrides = FAMILIES[family]
    if kind:
        tiny(monkeypatch, kind)
    sims = {}
    for executor in ("loop", "vmap"):
        cfg = cfg_factory(*COMMON, *overrides, f"hardware.executor={executor}")
        if kind:
            cfg.data.name = "tiny"
        sims[executor] = Simulation(cfg)
    loop, vec = sims["loop"], sims["vmap"]
    assert isinstance(vec.executor, VmapExecutor)
    for rnd in (1, 2) if family != "batchnorm_cnn" else (1,):  # MobileNetV2 in float64 is slow: its first round
        if rnd > 1:
            vec.load_state_dict(loop.state_dict())
        loop_out, vec_out = loop.run_round(rnd), vec.run_round(rnd)
        taus = [p.tau for p in loop_out.plans]
        assert len(set(taus)) > 1, "the case must have unequal tau_i"
        assert len(taus) == 5 < vec.num_clients, "and partial participation"
        torch.testing.assert_close(vec.state.params, loop.state.params, rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(vec_out.result.mean_loss, loop_out.result.mean_loss, rtol=1e-4, atol=1e-5)
        for name in loop.state.buffers:
            torch.testing.assert_close(vec.state.buffers[name], loop.state.buffers[name], rtol=1e-4, atol=1e-5)


def test_flushed_denormals_give_the_rounds_of_gradual_underflow_in_every_thread(monkeypatch, cfg_factory):
    """hardware.denormals=flush (the default) takes results below float's normal range as 0, which a CPU computes
    at full speed (a recurrent model's gradients decay into that range through time: scripts/denormals_cost.py): a
    GRU's rounds in the loop executor's threads equal those of IEEE's gradual underflow (keep) to float rounding, and
    the mode holds in the run's thread and in the threads it starts."""
    import threading

    tiny(monkeypatch, "tokens")
    params = {}
    for mode in ("keep", "flush"):
        sim, _ = two_rounds(cfg_factory, FAMILIES["gru"][1], "loop", "tiny", denormals=mode, loop_threads=2)
        seen = []
        thread = threading.Thread(target=lambda: seen.append((torch.tensor([1e-39]) * 1.5).item()))
        thread.start()
        thread.join()
        assert ((torch.tensor([1e-39]) * 1.5).item() == 0.0) is (mode == "flush")
        assert (seen[0] == 0.0) is (mode == "flush")
        params[mode] = sim.state.params
    torch.testing.assert_close(params["flush"], params["keep"], rtol=1e-6, atol=1e-7)


@pytest.mark.slow  # a control of the test above's design, not of fedrun's code: six MobileNetV2 rounds in float64
def test_the_batchnorm_familys_training_amplifies_rounding_so_its_rounds_share_a_start(monkeypatch, cfg_factory):
    """The control behind test_vmap_round_equals_loop_round's shared start: the loop against itself, its second round
    started from its own state nudged by 1e-12 (float64 rounding's size), moves by more than 1e-8; so two executors'
    second rounds from their own first rounds differ by what the training amplifies, whichever CPU sums them."""
    tiny(monkeypatch, "image32")
    overrides = FAMILIES["batchnorm_cnn"][1]

    def loop_after_two_rounds(nudge: float) -> torch.Tensor:
        cfg = cfg_factory(*COMMON, *overrides, "hardware.executor=loop")
        cfg.data.name = "tiny"
        sim = Simulation(cfg)
        sim.run_round(1)
        noise = torch.randn(sim.state.params.shape, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
        sim.state.params = sim.state.params + nudge * noise
        sim.run_round(2)
        return sim.state.params

    plain = loop_after_two_rounds(0.0)
    assert torch.equal(loop_after_two_rounds(0.0), plain), "the loop repeats itself"
    assert (loop_after_two_rounds(1e-12) - plain).abs().max() > 1e-8


def test_clients_smaller_than_the_batch_form_their_own_group(cfg_factory):
    loop, _ = two_rounds(cfg_factory, ["data=digits", "model=logreg", "fl.batch_size=200"], "loop")
    vec, outs = two_rounds(cfg_factory, ["data=digits", "model=logreg", "fl.batch_size=200"], "vmap")
    assert len({p.batches.shape[1] for p in outs[0].plans}) > 1
    torch.testing.assert_close(vec.state.params, loop.state.params, rtol=1e-5, atol=1e-6)


def test_chunked_equals_unchunked(cfg_factory):
    whole, _ = two_rounds(cfg_factory, ["data=digits", "model=mlp"], "vmap")
    chunked, _ = two_rounds(cfg_factory, ["data=digits", "model=mlp"], "vmap", chunk_size=2)
    assert chunked.executor.chunk_size == 2
    torch.testing.assert_close(chunked.state.params, whole.state.params, rtol=1e-5, atol=1e-6)


def test_chunk_size_follows_free_memory(cfg_factory, monkeypatch):
    from fedrun.engine import executor as ex

    sim, _ = two_rounds(cfg_factory, ["data=digits", "model=mlp"], "vmap")
    plan = sim.run_round(3).plans[0]
    from fedrun.algorithms.base import ClientContext

    ctx = ClientContext(1, sim.state.params, sim.state.buffers, 0.1)
    monkeypatch.setattr(ex, "free_memory_bytes", lambda device: 10**12)
    monkeypatch.setattr(ex, "last_level_cache_bytes", lambda: None)  # the cache's limit: the next test
    big = sim.executor.chunk_for(sim.algo.local, sim.model, ctx, plan, sim.data.x_train)
    monkeypatch.setattr(ex, "free_memory_bytes", lambda device: 10**6)
    small = sim.executor.chunk_for(sim.algo.local, sim.model, ctx, plan, sim.data.x_train)
    assert big > 1000 and 1 <= small < 5


@pytest.mark.parametrize("overrides,limited", [
    (["model=mlp"], True),  # a dense chain's stacked step on a CPU
    (["model=mlp", "algo=scaffold"], False),  # its own step under vmap: not stacked by hand
    (["model=mlp", "hardware.gradient=autograd"], False),
    (["model=logreg", "fl.batch_size=2"], False),  # local SGD in blocks (engine/blocked.py)
    (["model=logreg"], True),
    (["model=cnn3"], False),  # a cohort as one network: more clients, faster grouped convolutions
    (["model=mlp", "hardware.cache_fraction=null"], False),
])
def test_a_dense_chains_stacked_clients_are_chunked_to_fit_half_the_last_level_cache(cfg_factory, monkeypatch,
                                                                                      overrides, limited):
    from fedrun.algorithms.base import ClientContext
    from fedrun.engine import executor as ex

    sim = Simulation(cfg_factory(*COMMON, "data=digits", *overrides, "hardware.executor=vmap"))
    plan = sim.run_round(1).plans[0]
    ctx = ClientContext(1, sim.state.params, sim.state.buffers, 0.1)
    monkeypatch.setattr(ex, "free_memory_bytes", lambda device: 10**12)

    def chunk(cache):
        monkeypatch.setattr(ex, "last_level_cache_bytes", lambda: cache)
        return sim.executor.chunk_for(sim.algo.local, sim.model, ctx, plan, sim.data.x_train)

    unlimited = chunk(None)  # a cache of unknown size limits nothing
    assert unlimited > 10**4
    if not limited:
        assert chunk(2**20) == unlimited
        return
    one, four = chunk(2**22), chunk(2**24)  # half of 4 and 16 MiB
    assert 1 <= one < 1000 and abs(four - 4 * one) <= 4 and chunk(1) == 1


def test_cohorts_chunked_by_the_cache_equal_whole_ones(cfg_factory, monkeypatch):
    from fedrun.engine import executor as ex

    monkeypatch.setattr(ex, "last_level_cache_bytes", lambda: 2**20)  # half a MiB: the 2NN's clients one by one
    chunks = []
    chunk_for = ex.VmapExecutor.chunk_for
    monkeypatch.setattr(ex.VmapExecutor, "chunk_for", lambda *a, **k: chunks.append(chunk_for(*a, **k)) or chunks[-1])
    chunked, _ = two_rounds(cfg_factory, ["data=digits", "model=mlp"], "vmap")
    whole, _ = two_rounds(cfg_factory, ["data=digits", "model=mlp"], "vmap", cache_fraction="null")
    assert chunks[:2] == [1, 1] and chunks[2] > 5  # the chunked run's two rounds, then the whole cohort's
    torch.testing.assert_close(chunked.state.params, whole.state.params, rtol=1e-5, atol=1e-6)


def test_the_last_level_cache_is_read_from_sysfs(tmp_path):
    from fedrun.engine.executor import last_level_cache_bytes

    for index, size in (("index0", "48K"), ("index2", "1024K"), ("index3", "32768K")):
        (tmp_path / index).mkdir()
        (tmp_path / index / "size").write_text(size + "\n")
    assert last_level_cache_bytes(tmp_path) == 32 * 2**20
    assert last_level_cache_bytes(tmp_path / "absent") is None


THREADS = torch.get_num_threads() > 1


@pytest.mark.parametrize("data,model,batch,more,expected", [
    ("digits", "logreg", 64, [], "vmap"), ("digits", "mlp", 64, [], "vmap"),
    # Sequential CNNs under local SGD: their cohort steps as one network, faster than the loop on the bench's
    # workloads up to 1 GFLOP per client step (cnn3 on digits: about 30 and 120 MFLOP, LeNet-5 on MNIST 145) ...
    ("digits", "cnn3", 16, [], "vmap"), ("digits", "cnn3", 64, [], "vmap"), ("mnist", "lenet5", 64, [], "vmap"),
    ("mnist", "cnn_fedgh", 64, [], "loop"),  # about 1.6 GFLOP: the loop
    # ... and otherwise about 30 MFLOP per client step is small, so vmap, unless the loop trains clients in threads
    # (more than one torch thread), which beats vmap on every convolutional workload of the bench
    ("digits", "cnn3", 16, ["hardware.cohort_network=false"], "loop" if THREADS else "vmap"),
    ("digits", "cnn3", 16, ["algo=scaffold"], "loop" if THREADS else "vmap"),  # its own step: not stacked
    ("digits", "cnn3", 64, ["hardware.cohort_network=false"], "loop"),  # about 120 MFLOP
    ("digits", "centralized", 64, [], "loop"),  # one client per round: nothing to batch
])
def test_auto_resolves_to_a_concrete_executor_and_logs_it(cfg_factory, caplog, data, model, batch, more, expected):
    with caplog.at_level(logging.INFO, logger="fedrun"):
        algo = ["algo=centralized", "model=logreg"] if model == "centralized" else [f"model={model}"]
        sim = Simulation(cfg_factory(f"data={data}", *algo, f"fl.batch_size={batch}", "hardware.executor=auto",
                                     "hardware.device=cpu", *more))  # auto's CPU rules (a GPU: vmap)
    assert sim.executor.name == expected
    assert any(f"hardware.executor=auto resolved to {expected}" in r.getMessage() for r in caplog.records)


def test_compile_without_a_cpp_compiler_is_refused_before_any_work(cfg_factory, monkeypatch):
    from fedrun.engine import executor_choice
    from fedrun.errors import ConfigError

    monkeypatch.setattr(executor_choice.shutil, "which", lambda name: None)
    with pytest.raises(ConfigError, match="hardware.compile=true: torch.compile needs a C\\+\\+ compiler"):
        Simulation(cfg_factory("data=digits", "model=logreg", "hardware.executor=vmap", "hardware.compile=true",
                               "hardware.device=cpu"))


def test_compile_with_the_loop_executor_warns_that_it_does_nothing(cfg_factory, caplog):
    with caplog.at_level(logging.WARNING, logger="fedrun"):
        sim = Simulation(cfg_factory("data=digits", "model=logreg", "hardware.executor=loop", "hardware.compile=true"))
    assert sim.executor.name == "loop"
    assert any("hardware.compile=true has no effect" in r.getMessage() for r in caplog.records)


def test_a_large_cohort_creates_no_module_copies(cfg_factory, monkeypatch):
    from torch import nn

    sim = Simulation(cfg_factory("data=digits", "model=logreg", "fl.num_clients=400", "fl.clients_per_round=400",
                                 "partition=iid", "fl.batch_size=1", "hardware.executor=vmap"))
    created = []
    original = nn.Module.__init__

    def counting_init(self, *args, **kwargs):
        created.append(type(self))
        original(self, *args, **kwargs)

    monkeypatch.setattr(nn.Module, "__init__", counting_init)
    out = sim.run_round(1)
    assert len(out.plans) == 400 and created == []


@pytest.mark.slow  # the benchmark's records, not fedrun's results
def test_bench_records_are_consistent(tmp_path):
    import json

    from fedrun.bench.workloads import main

    assert main(["--quick", "--only", "softmax576_400,svm_mnist_5,lenet5_mnist_10", "--repeats", "1", "--device",
                 "cpu", "--out", str(tmp_path / "b.json")]) == 0
    records = json.loads((tmp_path / "b.json").read_text())
    assert [r["workload"] for r in records] == ["softmax576_400", "svm_mnist_5", "lenet5_mnist_10"]
    lenet = records.pop()  # convolutions on a CPU: channels-last images, timed in NCHW beside them
    assert lenet["layout_speedup"] == pytest.approx(lenet["contiguous_s"] / lenet["auto_s"])
    assert lenet["eval_speedup"] == pytest.approx(lenet["eval_contiguous_s"] / lenet["eval_s"])
    assert all("contiguous_s" not in r for r in records)
    assert f"| lenet5_mnist_10 | {lenet['auto']} | {lenet['contiguous_s']:.3f} |" in (tmp_path / "b.md").read_text()
    # a Sequential CNN's cohort steps as one network under vmap (auto's choice), timed under torch.func beside it
    assert lenet["auto"] == "vmap" and "one network" in lenet["auto_reason"]
    assert lenet["network_speedup"] == pytest.approx(lenet["func_s"] / lenet["vmap_s"])
    row = f"| lenet5_mnist_10 | 64 | {lenet['func_s']:.3f} | {lenet['vmap_s']:.3f} |"
    assert row in (tmp_path / "b.md").read_text()
    assert all("func_s" not in r for r in records)
    # its first convolution, pooling and ReLU as the compiled kernel (where it builds), timed layer by layer beside it
    from fedrun.model.native import fused_conv

    if fused_conv.enabled():
        assert lenet["fused_speedup"] == pytest.approx(lenet["unfused_s"] / lenet["vmap_s"])
        assert f"| lenet5_mnist_10 | 64 | {lenet['unfused_s']:.3f} | {lenet['vmap_s']:.3f} |" in (tmp_path / "b.md"
                                                                                                   ).read_text()
        # which reads the minibatches' images in place: timed with them gathered beside it
        assert lenet["in_place_speedup"] == pytest.approx(lenet["gathered_s"] / lenet["vmap_s"])
    assert all("unfused_s" not in r for r in records)
    assert lenet["machine"]["convolution_peak_gflops"] > 0  # the peak's product through oneDNN, on a CPU
    for r in records:
        for key in ("workload", "clients", "steps", "loop_s", "threads_s", "loop_threads", "vmap_s", "auto_s",
                    "speedup", "peak_mem_mb", "gflops", "matmul_peak_gflops", "device"):
            assert key in r
        assert r["speedup"] == pytest.approx(r["loop_s"] / r["vmap_s"])
        assert r["auto"] == "vmap" and r["matmul_peak_gflops"] > 0
    softmax, svm = records  # single samples on a one-layer model run in blocks, timed step by step beside them
    assert softmax["blocks_speedup"] == pytest.approx(softmax["stepwise_s"] / softmax["vmap_s"])
    assert softmax["blocks_s"] == softmax["vmap_s"]  # on a CPU the vmap executor runs the blocks
    assert softmax["block_steps"] == 16 and "stepwise_s" not in svm  # B = 100: matrix products already
    from fedrun.model.native import indexed_rows

    if indexed_rows.enabled():  # their steps (blocks) read their rows in place where the kernel builds: timed gathered
        for r in records:
            assert r["in_place_speedup"] == pytest.approx(r["gathered_s"] / r["vmap_s"])
            assert f"| {r['workload']} | {r['batch']} | {r['gathered_s']:.3f} | {r['vmap_s']:.3f} |" in (
                tmp_path / "b.md").read_text()
    text = (tmp_path / "b.md").read_text()
    assert "| softmax576_400 |" in text and f"| softmax576_400 | 1 | 16 | {softmax['stepwise_s']:.3f} |" in text
    # a dense model's and a Sequential CNN's evaluation by hand, timed with the module's forward beside it
    for r in [*records, lenet]:
        assert r["by_hand_eval_speedup"] == pytest.approx(r["eval_torch_s"] / r["eval_s"]) and r["eval_samples"] > 0
        assert f"| {r['workload']} | {r['eval_samples']} | {r['eval_torch_s']:.4f} | {r['eval_s']:.4f} |" in text


def test_the_bench_times_a_long_round_once_after_its_warm_up_and_the_short_ones_repeatedly(monkeypatch):
    """On a GPU the sequential loop over a 1000-client cohort takes minutes a round: timed once after its warm-up,
    while the other executors are timed as before, interleaved with it."""
    import time

    import fedrun.bench.workloads as bench

    class Fake:
        def __init__(self, sleep_s):
            self.sleep_s, self.calls = sleep_s, 0

        def run(self, *args):
            self.calls += 1
            time.sleep(self.sleep_s)

    monkeypatch.setattr(bench, "LONG_ROUND_S", 0.03)
    long, short = Fake(0.04), Fake(0.0)
    x = torch.zeros(1)
    best, peak, first = bench.time_rounds({"long": long, "short": short}, None, None, None, [None], x, x, 3)
    assert long.calls == 3, "warm-up, one timed round, the memory's round"
    assert short.calls == 22, "warm-up, 20 timed rounds (a short round's at most), the memory's round"
    assert best["long"] >= 0.04 and first["long"] >= 0.04 and set(peak) == {"long", "short"}


def test_with_one_loop_thread_the_bench_times_the_loop_once_for_both_columns(tmp_path, monkeypatch):
    import json

    import fedrun.bench.workloads as bench

    timed = []
    time_rounds = bench.time_rounds
    monkeypatch.setattr(bench, "time_rounds", lambda executors, *a, **k: timed.append(set(executors))
                        or time_rounds(executors, *a, **k))
    monkeypatch.setattr(bench, "loop_threads", lambda *a: 1)  # as on a GPU
    assert bench.main(["--quick", "--only", "softmax576_400", "--repeats", "1", "--device", "cpu", "--out",
                       str(tmp_path / "b.json")]) == 0
    (r,) = json.loads((tmp_path / "b.json").read_text())
    from fedrun.model.native import indexed_rows

    assert timed == [{"loop", "vmap", "auto", "stepwise"} | ({"gathered"} if indexed_rows.enabled() else set())]
    assert r["loop_threads"] == 1 and r["threads_s"] == r["loop_s"]


def test_a_bench_stopped_part_way_keeps_the_workloads_it_finished(tmp_path, monkeypatch):
    """A lent GPU's time limit can end a bench before its last workload: what it finished is on disk, marked
    partial."""
    import json

    import fedrun.bench.workloads as bench

    run_workload = bench.run_workload

    def stop_at_the_svm(w, *args):
        if w.name == "svm_mnist_5":
            raise KeyboardInterrupt
        return run_workload(w, *args)

    monkeypatch.setattr(bench, "run_workload", stop_at_the_svm)
    with pytest.raises(KeyboardInterrupt):
        bench.main(["--quick", "--only", "softmax576_400,svm_mnist_5", "--repeats", "1", "--device", "cpu", "--out",
                    str(tmp_path / "b.json")])
    assert [r["workload"] for r in json.loads((tmp_path / "b.json").read_text())] == ["softmax576_400"]
    text = (tmp_path / "b.md").read_text()
    assert "| softmax576_400 |" in text and "(partial: 1 of 2 workloads so far)" in text


@pytest.mark.slow  # the benchmark's records, not fedrun's results
def test_the_bench_times_a_dense_cohort_whole_beside_its_cache_sized_chunks(tmp_path, monkeypatch):
    import json

    from fedrun.bench.workloads import main
    from fedrun.engine import executor as ex

    monkeypatch.setattr(ex, "last_level_cache_bytes", lambda: 2**23)  # half of 8 MiB: a few 2NN clients a chunk
    assert main(["--quick", "--only", "mlp_synthetic_100,svm_mnist_5", "--repeats", "1", "--device", "cpu",
                 "--out", str(tmp_path / "b.json")]) == 0
    svm, mlp = json.loads((tmp_path / "b.json").read_text())
    assert mlp["workload"] == "mlp_synthetic_100" and mlp["clients"] == 10 and 1 < mlp["cache_chunk"] < 10
    assert mlp["chunk_speedup"] == pytest.approx(mlp["whole_s"] / mlp["vmap_s"])
    row = f"| mlp_synthetic_100 | 10 | {mlp['cache_chunk']} | {mlp['whole_s']:.3f} | {mlp['vmap_s']:.3f} |"
    assert row in (tmp_path / "b.md").read_text()
    assert "whole_s" not in svm  # 5 clients of 785 parameters: one chunk either way


@pytest.mark.parametrize("mode", ["system", "keep"])
def test_the_bench_keeps_host_memory_as_runs_do_unless_told_and_records_which(tmp_path, monkeypatch, mode):
    import json

    from fedrun.bench.workloads import main
    from fedrun.engine import host_memory

    monkeypatch.setattr(host_memory, "_kept", False)
    monkeypatch.setattr(host_memory, "keep_freed_memory", lambda: setattr(host_memory, "_kept", True) or True)
    argv = ["--quick", "--only", "svm_mnist_5", "--repeats", "1", "--out", str(tmp_path / "b.json")]
    main(argv + (["--host-memory", "system"] if mode == "system" else []))
    assert host_memory.kept() == (mode == "keep")
    assert json.loads((tmp_path / "b.json").read_text())[0]["machine"]["host_memory"] == mode


@pytest.mark.parametrize("name", ["cpu", "gpu"])
def test_auto_is_within_ten_percent_of_the_fastest_executor_in_the_committed_bench(name):
    """Issue #27: on every workload of the committed bench output (results/bench/<device>.json, made by
    ``python -m fedrun.bench.workloads``), auto's round takes at most 1.1x the fastest executor's: asserted on the
    measurements, not by timing in a test."""
    import json
    from pathlib import Path

    path = Path(__file__).parents[1] / "results" / "bench" / f"{name}.json"
    if not path.exists():
        pytest.skip(f"{path.name} not made on this project's machines yet (make bench on one with CUDA)")
    records = [r for r in json.loads(path.read_text()) if "auto_vs_best" in r]
    assert records
    assert {r["workload"]: round(r["auto_vs_best"], 2) for r in records if r["auto_vs_best"] > 1.10} == {}


def test_bench_addon_cost_records(tmp_path):
    import json

    from fedrun.bench.workloads import main

    assert main(["--quick", "--only", "herd_svm_mnist,harmonize_perceptron_k1000,gift_lenet5_k40", "--repeats", "1",
                 "--out", str(tmp_path / "h.json")]) == 0
    herd, harm, gift = json.loads((tmp_path / "h.json").read_text())
    assert gift["addons"] == ["gift"] and gift["gift_share"] == pytest.approx(gift["gift_s"] / gift["train_s"])
    assert herd["workload"] == "herd_svm_mnist" and herd["parameters"] == 785 and herd["tau"] == 12
    assert herd["herd_share"] == pytest.approx(herd["herd_s"] / herd["train_s"])
    assert herd["steps_mb"] == pytest.approx(herd["clients"] * herd["tau"] * 785 * 4 / 2**20)
    assert harm["addons"] == ["fedgh", "dgt"] and harm["clients"] == 100 and harm["parameters"] == 305
    assert harm["dgt_share"] == pytest.approx(harm["dgt_s"] / harm["train_s"])
    table = (tmp_path / "h.md").read_text()
    assert "| herd_svm_mnist |" in table and "| fedgh |" in table and "| dgt |" in table


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


@pytest.mark.parametrize("family", list(EVERY_FAMILY))
def test_every_algorithm_family_gives_the_same_rounds_under_both_executors(cfg_factory, family):
    """The whole ServerState after two rounds (model, every part's state, the clients' persistent states) under loop
    and vmap: client state across rounds, uploads, server hooks, multi-batch steps, selectors' step gradients,
    harmonisers, schedules and the bank's round (float64: FedDecorr standardises features by sqrt(var + 1e-8), which
    amplifies float32 rounding)."""
    common = ["data=digits", "model=cnn3", *EVERY_FAMILY[family], "fl.clients_per_round=4", "fl.batch_size=16",
              "hardware.dtype=float64", "fl.momentum=0.5"]
    # FedDecorr's regulariser, as its reference code, subtracts the squared diagonal of z^T z from the sum of all its
    # squares: the digits that cancel there differ between the executors' summation orders and grow by 1e4 through
    # the 1/sqrt(var + 1e-8) of nearly constant features (1e-9 after one round, 4e-4 after two): one round for it
    rounds = (1,) if family == "feddecorr" else (1, 2)
    states = {}
    # vmap: a batchable rule's cohort steps as one network (hardware.cohort_network), the others under torch.func;
    # graph: every step of the whole stack, finished clients masked (on a CPU its steps run eagerly)
    executors = ("loop", "vmap", "vmap,hardware.cohort_network=false", "graph")
    for executor in executors:
        sim = Simulation(with_values(cfg_factory(*common), *f"hardware.executor={executor}".split(",")))
        for rnd in rounds:
            sim.run_round(rnd)
        states[executor] = vars(sim.state)
    for executor in executors[1:]:
        assert_close_tree(states[executor], states["loop"], executor)


@pytest.mark.parametrize("family", ["scaffold", "bherd"])
def test_clients_finishing_one_by_one_give_the_vmapped_rounds(cfg_factory, family):
    """hardware.vmap_tail: the last clients still stepping finish with the plain step, written back into the stack;
    the rounds (client states, recorded steps, the bank) equal all-vmapped rounds whether none, some (2) or all (4 of
    4) clients finish alone, and the default resolves per model."""
    common = ["data=digits", "model=mlp", "hardware.device=cpu", *EVERY_FAMILY[family], "fl.clients_per_round=4",
              "fl.batch_size=16", "hardware.dtype=float64", "fl.momentum=0.5", "hardware.executor=vmap",
              "partition=dirichlet", "partition.alpha=0.3",
              "hardware.gradient=autograd"]  # autograd: BHerd's SGD would step natively
    states = {}
    for tail in (0, 2, 4):
        sim = Simulation(with_values(cfg_factory(*common), f"hardware.vmap_tail={tail}"))
        assert sim.executor.tail == tail
        plans = [sim.run_round(rnd).plans for rnd in (1, 2)]
        states[tail] = vars(sim.state)
    assert len({p.tau for p in plans[0]}) > 2, "the case must have clients of several lengths"
    assert_close_tree(states[2], states[0])
    assert_close_tree(states[4], states[0])
    assert Simulation(cfg_factory(*common[:-1])).executor.tail == 4
    assert Simulation(cfg_factory("data=digits", "model=cnn3", "hardware.executor=vmap")).executor.tail == 1


@pytest.mark.parametrize("model", ["mlp", "cnn3"])
@pytest.mark.parametrize("algo,more", [("fedavg", ["fl.momentum=0.9", "fl.weight_decay=0.01"]),
                                       ("fedprox", []), ("bherd", []), ("fednova", ["algo.local.mu=0.1"])])
def test_a_batchable_rule_on_a_stacking_model_steps_without_vmap_and_gives_the_loops_rounds(cfg_factory, monkeypatch,
                                                                                            algo, more, model):
    """Local SGD (FedAvg, FedProx, FedNova's local part, BHerd's steps) on a model with a by-hand gradient (mlp) or
    a Sequential CNN (cnn3: the cohort as one network) steps the stacked clients as one batch (no vmap): the
    rounds (client states, FedNova's a_i, herded steps) equal the loop's to float64 rounding, also with clients of
    several lengths dropping out of the stack, the stack's w updated in place (ctx.in_place; the loop's steps make
    new tensors). A rule built on it that adds its own terms (SCAFFOLD, FedDecorr) is not stacked."""
    from fedrun.algorithms.base import LocalRule
    from fedrun.engine.executor import steps_natively

    common = ["data=digits", f"model={model}", f"algo={algo}", *more, "fl.clients_per_round=4", "fl.batch_size=16",
              "hardware.dtype=float64", "partition=dirichlet", "partition.alpha=0.3", "hardware.device=cpu"]
    descend, in_place = LocalRule.descend, {}
    states = {}
    for executor in ("loop", "vmap"):
        monkeypatch.setattr(LocalRule, "descend", staticmethod(
            lambda ctx, state, d: (in_place.setdefault(executor, set()).add(ctx.in_place), descend(ctx, state, d))))
        sim = Simulation(with_values(cfg_factory(*common), f"hardware.executor={executor}"))
        for rnd in (1, 2):
            sim.run_round(rnd)
        states[executor] = vars(sim.state)
    assert steps_natively(sim.algo.local, sim.model)
    assert in_place == {"loop": {False}, "vmap": {True}}
    assert_close_tree(states["vmap"], states["loop"])
    for other in ("scaffold", "feddecorr"):
        sim = Simulation(cfg_factory("data=digits", f"model={model}", f"algo={other}"))
        assert not steps_natively(sim.algo.local, sim.model)
    sim = Simulation(cfg_factory(*common, "hardware.cohort_network=false", "hardware.gradient=autograd"))
    assert not steps_natively(sim.algo.local, sim.model)


def test_a_step_descends_in_place_only_where_the_executor_allows_it():
    """LocalRule.descend: w - eta * d into w's own memory with ctx.in_place, the same values as a new tensor
    without it, which leaves the given w (possibly shared: a loop client's start) as it was."""
    from fedrun.algorithms.base import ClientContext, LocalRule

    w, d = torch.randn(3, 5), torch.randn(3, 5)
    out = {}
    for in_place in (False, True):
        state = {"w": w.clone()}
        given = state["w"]
        LocalRule.descend(ClientContext(1, torch.zeros(5), {}, lr=0.3, in_place=in_place), state, d)
        assert state["direction"] is d and (state["w"] is given) == in_place
        assert torch.equal(given, state["w"] if in_place else w)
        out[in_place] = state["w"]
    assert torch.equal(out[True], out[False]) and torch.equal(out[False], torch.add(w, d, alpha=-0.3))


@pytest.mark.parametrize("model", ["mlp", "cnn3"])
def test_a_stacked_cohorts_lone_last_client_finishes_with_its_plain_step(cfg_factory, monkeypatch, model):
    """Stepping natively, the last client left in the stack (tau longer than the others') takes its own plain step
    (one client's parameters, not a stack of one) unless hardware.vmap_tail=0; the rounds are the loop's either way
    (the test above)."""
    from fedrun.model.functional import FunctionalModel

    common = ["data=digits", f"model={model}", "fl.clients_per_round=4", "fl.batch_size=16", "partition=dirichlet",
              "partition.alpha=0.3", "hardware.executor=vmap", "hardware.device=cpu"]
    shapes = []
    inner = FunctionalModel.loss_and_grad
    monkeypatch.setattr(FunctionalModel, "loss_and_grad",
                        lambda self, flat, *a, **k: shapes.append(flat.dim()) or inner(self, flat, *a, **k))
    for tail, alone in ((None, True), (0, False)):
        shapes.clear()
        sim = Simulation(cfg_factory(*common, *([f"hardware.vmap_tail={tail}"] if tail is not None else [])))
        taus = sorted(p.tau for p in sim.run_round(1).plans)
        assert taus[-1] > taus[-2], "the case must have one client longer than the rest"
        assert shapes.count(1) == (taus[-1] - taus[-2] if alone else 0) and 2 in shapes


@pytest.mark.parametrize("model,batch", [("logreg", 1), ("logreg", 3), ("svm", 1)])
@pytest.mark.parametrize("algo,more", [("fedavg", []), ("fedavg", ["fl.momentum=0.9", "fl.weight_decay=0.01"]),
                                       ("fedprox", ["fl.momentum=0.5"]), ("fednova", ["algo.local.mu=0.1"])])
def test_local_sgd_on_a_one_layer_model_in_blocks_of_steps_gives_the_loops_rounds(cfg_factory, model, batch, algo,
                                                                                  more):
    """Small minibatches on a one-layer model step in blocks (engine/blocked.py: the rule's own step on coefficient
    vectors, outputs from the block's Gram matrix): the rounds (model, client states, FedNova's a_i, losses) equal
    the loop's to float64 rounding, with clients of unequal lengths finishing inside blocks."""
    from fedrun.engine import blocked

    # lr 0.01: at 0.1, momentum 0.9 on single samples is chaotic and grows float64 rounding to 0.1 in two rounds
    common = ["data=digits", f"model={model}", f"algo={algo}", *more, "fl.clients_per_round=4", "fl.lr=0.01",
              f"fl.batch_size={batch}", "hardware.dtype=float64", "partition=dirichlet", "partition.alpha=0.3"]
    states, losses = {}, {}
    for executor in ("loop", "vmap"):
        sim = Simulation(with_values(cfg_factory(*common), f"hardware.executor={executor}"))
        outs = [sim.run_round(rnd) for rnd in (1, 2)]
        states[executor], losses[executor] = vars(sim.state), [o.result.mean_loss for o in outs]
    plans = outs[0].plans
    assert len({p.tau % blocked.block_length(sim.algo.local, sim.model, batch) for p in plans}) > 1
    assert blocked.block_length(sim.algo.local, sim.model, batch) > 0
    assert_close_tree(states["vmap"], states["loop"])
    assert_close_tree(losses["vmap"], losses["loop"], "losses")
    for other, width in (("scaffold", 1), ("fedavg", 16)):  # its own terms; minibatches that are products already
        sim = Simulation(cfg_factory("data=digits", f"model={model}", f"algo={other}"))
        assert blocked.block_length(sim.algo.local, sim.model, width) == 0
    sim = Simulation(cfg_factory("data=digits", "model=mlp"))
    assert blocked.block_length(sim.algo.local, sim.model, 1) == 0  # two layers: outputs not affine in the weights
    assert not Simulation(cfg_factory(*common, "hardware.executor=vmap", "hardware.blocks=false")).executor.blocks


def test_local_sgd_runs_in_blocks_of_steps_on_a_cpu_only(cfg_factory, monkeypatch, tmp_path):
    """hardware.blocks=true pays on a CPU; on a GPU a block's steps are as many launches of smaller kernels and step
    by step was faster (results/bench/gpu.md): a GPU run's vmap executor steps one by one, and the bench's vmap
    column is step by step there, with the blocks timed beside it (on a CPU: the other way round)."""
    import json

    from fedrun.bench import workloads as bench
    from fedrun.config.compose import option
    from fedrun.engine.executor_choice import make_executor

    sim = Simulation(cfg_factory("data=digits", "model=logreg", "fl.batch_size=1", "hardware.executor=vmap"))
    assert sim.executor.blocks
    x, y = sim.data.x_train[:1], sim.data.y_train[:1]
    gpu = make_executor(option("hardware", "auto"), sim.model, torch.device("cuda"), x, y, 4, sim.algo.local)
    assert gpu.name == "vmap" and not gpu.blocks
    # the bench as it would run on a GPU (on a CPU: test_bench_records_are_consistent)
    monkeypatch.setattr(bench, "blocks_pay", lambda blocks, device: False)
    out = tmp_path / "gpu.json"
    bench.main(["--quick", "--only", "softmax576_400", "--repeats", "1", "--device", "cpu", "--out", str(out)])
    (r,) = json.loads(out.read_text())
    assert r["vmap_s"] == r["stepwise_s"] != r["blocks_s"]
    assert r["blocks_speedup"] == r["stepwise_s"] / r["blocks_s"]
    row = f"| softmax576_400 | 1 | 16 | {r['stepwise_s']:.3f} | {r['blocks_s']:.3f} |"
    assert row in out.with_suffix(".md").read_text()


@pytest.mark.parametrize("algo", ["fedavg", "scaffold"])
def test_clients_without_a_state_of_their_own_start_from_one_init_stacked_as_each_ones(cfg_factory, algo):
    """``initial_states``: the stack of every client's own ``client_init``, bit for bit and in fresh memory (a
    round's steps write the stack in place); with any client state (SCAFFOLD's c_i after a round), each client's
    own init."""
    from fedrun.algorithms.base import ClientContext
    from fedrun.engine import tree
    from fedrun.engine.executor import initial_states

    sim = Simulation(cfg_factory("data=digits", "model=mlp", f"algo={algo}", "fl.momentum=0.9"))
    rule, ctx = sim.algo.local, ClientContext(1, sim.state.params, sim.state.buffers, 0.1, 0.9, 0.0)
    cohorts = [[None] * 3] + ([[None, {"c_i": torch.full_like(ctx.params, 2.0)}, None]] if algo == "scaffold" else [])
    for states in cohorts:
        stacked = initial_states(rule, ctx, states)
        own = tree.stack([rule.client_init(ctx, cs) for cs in states])
        assert tree.tree_map(lambda a, b: a.shape == b.shape and bool(torch.equal(a, b)), stacked, own) == \
            tree.tree_map(lambda a: True, own)
        assert all(leaf.is_contiguous() for leaf in tree.leaves(stacked))
        stacked["w"].add_(1.0)
        assert not torch.equal(stacked["w"][0], ctx.params) and torch.equal(own["w"][0], ctx.params)


@pytest.mark.parametrize("model", ["logreg", "mlp", "svm"])
@pytest.mark.parametrize("own", [False, True])
def test_full_gradients_batched_over_clients_equal_each_clients_own(monkeypatch, cfg_factory, model, own):
    """Clients' full-data losses and gradients (FSVRG's anchors, Zhao et al.'s preferences) come from calls that pad
    several clients to one length (cross-entropy models) or from one client at a time in chunks (clients above
    eval.batch_size samples; the squared hinge, which has no unscored target): both equal each client's loss and
    gradient over its whole data in one piece."""
    sim = Simulation(cfg_factory("data=digits", f"model={model}", *COMMON, "fl.num_clients=12",
                                 "eval.batch_size=160", "hardware.dtype=float64"))
    sizes = sorted(len(ix) for ix in sim.partition.indices)
    assert sizes[0] + sizes[1] <= 160 < sizes[-1]  # packed calls of several clients, and a client in chunks
    g = torch.Generator().manual_seed(0)
    clients = list(range(12))
    points = torch.randn(12 if own else 3, sim.model.dim, dtype=torch.float64, generator=g) * 0.1
    losses, grads = sim.full_losses_and_gradients(sim.state, points, clients, own=own)
    for k in clients:
        ix = torch.as_tensor(sim.partition.indices[k])
        for p, w in enumerate(points[k : k + 1] if own else points):
            loss, grad = sim.model.loss_and_grad(w, {}, sim.data.x_train[ix], sim.data.y_train[ix])
            torch.testing.assert_close(losses[k, p], loss)
            torch.testing.assert_close(grads[k, p], grad)


@pytest.mark.parametrize("budget", [20, 8])
def test_full_gradients_of_a_recurrent_sequence_model_equal_each_clients_own(monkeypatch, tmp_path, budget):
    """A recurrent model (no vmap rule for its fused CPU kernel) takes its clients and points one at a time; with
    sequence targets a client's chunks are weighted by their scored tokens (budget 8 splits every client), so the
    result is each client's token-mean loss and gradient over its whole data."""
    from fedrun.config.compose import compose_config
    from fedrun.data.fixtures import stand_in

    overrides, _ = stand_in("leaf_reddit", tmp_path / "fixture")  # LEAF Reddit's fixture, in LEAF's format
    sim = Simulation(compose_config(["data=leaf_reddit", f"data.root={tmp_path / 'fixture'}", *overrides,
                                     "data.vocab_size=6", "partition=natural", "model=lstm_lm", "model.hidden=8",
                                     f"eval.batch_size={budget}",
                                     "hardware=cpu", "hardware.dtype=float64"]))
    points = torch.stack([sim.state.params, sim.state.params + 0.01])
    losses, grads = sim.full_losses_and_gradients(sim.state, points, range(sim.num_clients))
    for k in range(sim.num_clients):
        ix = torch.as_tensor(sim.partition.indices[k])
        assert (sim.data.y_train[ix] == -100).any()  # padded positions that the mean must leave out
        for p, w in enumerate(points):
            loss, grad = sim.model.loss_and_grad(w, {}, sim.data.x_train[ix], sim.data.y_train[ix])
            torch.testing.assert_close(losses[k, p], loss)
            torch.testing.assert_close(grads[k, p], grad)


@pytest.mark.skipif(not any(shutil.which(c) for c in ("g++", "clang++", "c++")),
                    reason="torch.compile needs a C++ compiler on the CPU")
@pytest.mark.parametrize("algo,more", [("fsvrg", ["fl.batch_size=1", "fl.weight_decay=0.01"]),
                                       ("bherd", ["algo.step_selector.alpha=0.5"])])
def test_a_compiled_step_equals_the_eager_one(cfg_factory, algo, more):
    """hardware.compile=true: the whole stack steps and finished clients' states are set aside (unequal tau_i here);
    the rounds, client states and recorded step directions (BHerd) equal the uncompiled executor's."""
    runs = {}
    for compile_ in (False, True):
        sim, outs = two_rounds(cfg_factory, ["data=digits", "model=logreg", f"algo={algo}", *more], "vmap",
                               compile=compile_)
        assert sim.executor.compile is compile_
        runs[compile_] = (sim, outs)
    (eager, eager_out), (compiled, compiled_out) = runs[False], runs[True]
    assert len({p.tau for p in eager_out[0].plans}) > 1
    torch.testing.assert_close(compiled.state.params, eager.state.params, rtol=1e-5, atol=1e-6)
    for a, b in zip(compiled_out, eager_out):
        torch.testing.assert_close(a.result.mean_loss, b.result.mean_loss, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(a.result.updates, b.result.updates, rtol=1e-5, atol=1e-6)
    for client, state in eager.state.clients.items():
        for key, value in state.items():
            torch.testing.assert_close(compiled.state.clients[client][key], value)


@pytest.mark.parametrize("name", ["svm", "mlp", "cnn_bherd", "cnn_fedgh", "cnn_reddi", "cnn3", "cnn_leaf_femnist",
                                  "cnn_leaf_celeba", "lenet5", "mobilenetv2"])
def test_the_step_flop_count_equals_torchs_flop_counter(name):
    """``auto`` decides from one step's FLOPs, counted from the layers' shapes (FlopCounterMode would import
    torch._dynamo in every run): the count is FlopCounterMode's, for every image model (depthwise convolutions,
    whose weight gradient torch counts ``groups`` times, included)."""
    from torch.utils.flop_counter import FlopCounterMode

    from fedrun.config.compose import option

    from fedrun.engine.executor import flops_per_step
    from fedrun.model.functional import FunctionalModel
    from fedrun.model.zoo import MODELS, build_model

    side = max(MODELS[name].min_hw, 8)
    extra = {"width_mult": 0.25, "dropout": 0.0} if name == "mobilenetv2" else {}
    module, objective = build_model(option("model", name, **extra), "image", (3, side, side), 5, "x")
    model = FunctionalModel(module, objective)
    x, y = torch.randn(4, 3, side, side), torch.randint(0, 5, (4,))
    counter = FlopCounterMode(display=False)
    with counter:
        model.loss_and_grad(model.init_params(), model.init_buffers(), x, y)
    buffers = model.init_buffers()
    assert flops_per_step(model, x, y) == counter.get_total_flops() > 0
    assert all(torch.equal(v, model.init_buffers()[k]) for k, v in buffers.items()), "the template's buffers kept"


@pytest.mark.parametrize("family", ["fedprox", "scaffold", "feddecorr", "perfedavg", "bherd", "mafsvrg"])
def test_the_loop_in_threads_gives_the_one_thread_loops_rounds_bit_for_bit(cfg_factory, family):
    """Clients trained at once in threads (each with one intra-op thread and its own model replica) against the loop
    on one intra-op thread: the whole ServerState after two rounds, equal bit for bit (client state, the features
    hook of FedDecorr on each replica, multi-batch steps, recorded step gradients, the bank)."""
    common = ["data=digits", "model=cnn3", *EVERY_FAMILY[family], "fl.clients_per_round=4", "fl.batch_size=16",
              "fl.momentum=0.5", "hardware.executor=loop", "hardware.device=cpu"]  # threads: a CPU's
    before = torch.get_num_threads()
    states = {}
    try:
        for threads in (1, 3):
            torch.set_num_threads(1)
            sim = Simulation(cfg_factory(*common, f"hardware.loop_threads={threads}"))
            assert sim.executor.threads == threads
            for rnd in (1, 2):
                sim.run_round(rnd)
            assert torch.get_num_threads() == 1  # the intra-op threads are given back after the cohort
            states[threads] = vars(sim.state)
    finally:
        torch.set_num_threads(before)
    assert_close_tree(states[3], states[1], exact=True)


def test_threads_take_the_longest_clients_first(cfg_factory, monkeypatch):
    """The round ends with its last client: threads claim clients by tau, longest first, so a long one is not left
    to train alone at the end. Each thread claims one client before it trains, so the first clients to start are the
    longest ones, whichever thread runs them."""
    import fedrun.engine.executor as executor

    started, train = [], executor._train_client
    monkeypatch.setattr(executor, "_train_client", lambda rule, model, ctx, plan, *rest: started.append(plan.tau)
                        or train(rule, model, ctx, plan, *rest))
    sim = Simulation(cfg_factory("data=digits", "model=logreg", "partition=dirichlet", "hardware.executor=loop",
                                 "hardware.loop_threads=2", "fl.num_clients=6", "fl.clients_per_round=6"))
    sim.run_round(1)
    assert len(set(started)) > 2, "clients of different lengths"
    assert sorted(started[:2]) == sorted(started)[-2:]


def test_the_loop_runs_clients_in_threads_only_where_their_draws_cannot_depend_on_timing(cfg_factory):
    from fedrun.errors import ConfigError

    torch_threads = torch.get_num_threads()
    sim = Simulation(cfg_factory("data=digits", "model=cnn3", "hardware.executor=loop", "fl.clients_per_round=5",
                                 "hardware.device=cpu"))
    assert sim.executor.threads == max(1, min(torch_threads, 5))  # auto: one client per intra-op thread
    dropout = ["data=digits", "model=cnn_reddi", "hardware.executor=loop", "hardware.device=cpu"]
    assert Simulation(cfg_factory(*dropout)).executor.threads == 1  # dropout draws from one shared generator
    with pytest.raises(ConfigError, match="hardware.loop_threads=2: the model has Dropout"):
        Simulation(cfg_factory(*dropout, "hardware.loop_threads=2"))



@pytest.mark.parametrize("model,more,dtype,rounds,tol", [
    ("cnn3", ["fl.momentum=0.9"], "float64", 2, 1e-10),
    ("cnn3", ["fl.momentum=0.9"], "float32", 2, 1e-4)])
# not MobileNetV2: its BatchNorm over a few samples at 1x1 spatial size amplifies rounding (see FAMILIES) to 2e-9
# after one round in float64 and 3e-3-0.4 after two between the two layouts (each layout's rounds are the same
# bit for bit from run to run), and it takes minutes on two cores
def test_channels_last_images_give_the_contiguous_rounds(monkeypatch, cfg_factory, model, more, dtype, rounds, tol):
    """hardware.layout: the same rounds (model, client losses) and evaluation in channels-last strides
    as in NCHW, to float rounding; auto picks channels-last for a convolutional model on a CPU."""
    tiny(monkeypatch, "image32")
    runs = {}
    for layout in ("contiguous", "channels_last", "auto"):
        cfg = cfg_factory(*COMMON, f"model={model}", *more, f"hardware.dtype={dtype}", "hardware.executor=loop",
                          f"hardware.layout={layout}", "fl.batch_size=32")  # at least CHANNELS_LAST_MIN_BATCH
        cfg.data.name = "tiny"
        sim = Simulation(cfg)
        outs = [sim.run_round(r) for r in range(1, rounds + 1)]
        runs[layout] = sim, outs, sim.evaluation.evaluate(sim.state)
    assert runs["auto"][0].model.channels_last and not runs["contiguous"][0].model.channels_last
    (a, a_outs, a_eval), (b, b_outs, b_eval) = runs["channels_last"], runs["contiguous"]
    torch.testing.assert_close(a.state.params, b.state.params, rtol=tol, atol=tol)
    for name in b.state.buffers:
        torch.testing.assert_close(a.state.buffers[name], b.state.buffers[name], rtol=tol, atol=tol)
    for x, y in zip(a_outs, b_outs):
        torch.testing.assert_close(x.result.mean_loss, y.result.mean_loss, rtol=tol, atol=tol)
    assert a_eval["test_acc"] == pytest.approx(b_eval["test_acc"], abs=1 / 240)  # one test sample at most
    assert a_eval["test_loss"] == pytest.approx(b_eval["test_loss"], rel=tol)


def test_one_channel_images_enter_in_channels_last_strides_that_the_convolutions_keep():
    """For C = 1 the two layouts coincide, and ``contiguous(memory_format=channels_last)`` keeps the NCHW strides:
    the first convolution's output would then stay NCHW, with every layer after it (the slow CPU path)."""
    from fedrun.model.functional import channels_last

    x = torch.randn(4, 1, 28, 28)
    conv = torch.nn.Conv2d(1, 6, 5)
    assert not conv(x.contiguous(memory_format=torch.channels_last)).is_contiguous(memory_format=torch.channels_last)
    out = conv(channels_last(x))
    assert out.is_contiguous(memory_format=torch.channels_last) and not out.is_contiguous()
    assert torch.equal(channels_last(x), x)


def test_a_model_without_convolutions_or_on_a_gpu_keeps_its_layout(cfg_factory):
    from fedrun.model.functional import prefers_channels_last

    assert not Simulation(cfg_factory("data=digits", "model=logreg", "hardware=cpu")).model.channels_last
    assert Simulation(cfg_factory("data=digits", "model=cnn3", "hardware=cpu")).model.channels_last
    assert not prefers_channels_last(torch.nn.Conv2d(1, 2, 3), torch.device("cuda"))


def test_only_batches_large_enough_to_gain_enter_channels_last(monkeypatch):
    import fedrun.model.functional as functional
    from fedrun.model.zoo import build_model
    from fedrun.config.compose import option

    module, objective = build_model(option("model", "cnn3"), "image", (1, 8, 8), 10, "digits")
    model = functional.FunctionalModel(module, objective, channels_last=True)
    laid_out = []
    monkeypatch.setattr(functional, "channels_last", lambda x: laid_out.append(len(x)) or x)
    w, buffers = model.init_params(), model.init_buffers()
    for n in (functional.CHANNELS_LAST_MIN_BATCH - 1, functional.CHANNELS_LAST_MIN_BATCH):
        model.forward(w, buffers, torch.randn(n, 1, 8, 8))
    assert laid_out == [functional.CHANNELS_LAST_MIN_BATCH]


@pytest.mark.parametrize("family", ["fedavg", "fednova", "scaffold", "feddyn", "mimesvrg", "fsvrg"])
def test_a_chunks_clients_finish_in_one_stacked_call_as_each_by_itself(cfg_factory, family):
    """``stacked_final``: the updates, new client states and uploads of every client's own ``client_final`` on its
    row, bit for bit, whether no client, every client or some (the per-client way) bring a state of their own
    (after a round: SCAFFOLD's c_i, FedDyn's g_i, MimeSVRG's h, FSVRG's statics)."""
    from fedrun.algorithms.base import ClientContext
    from fedrun.engine import tree
    from fedrun.engine.executor import stacked_final

    overrides = ["data=digits", "model=logreg", "fl.num_clients=6", "fl.clients_per_round=6",
                 *EVERY_FAMILY.get(family, [f"algo={family}"])]
    sim = Simulation(cfg_factory(*overrides))
    sim.run_round(1)
    rule = sim.algo.local
    ctx = ClientContext(2, sim.state.params, sim.state.buffers, 0.1, 0.0, 0.0,
                        extras=rule.broadcast(sim.state.local))
    own = [sim.state.clients.get(c) for c in range(3)]
    cohorts = [[None] * 3, own, [own[0], None, own[2]]] if own[0] is not None else [[None] * 3]
    for client_states in cohorts:
        if any(cs is None for cs in client_states) and family == "fsvrg":
            continue  # FSVRG's clients always bring their statics
        torch.manual_seed(0)
        states = [rule.client_init(ctx, cs) for cs in client_states]
        for s in states:  # as if trained: each row its own weights
            s["w"] = s["w"] + torch.randn_like(s["w"])
        want = [rule.client_final(ctx, s, cs) for s, cs in zip(states, client_states)]
        updates, new_states, uploads = stacked_final(rule, ctx, tree.stack(states), client_states)
        assert torch.equal(updates, torch.stack([u for u, _, _ in want]))
        assert_close_tree(new_states, [n for _, n, _ in want], exact=True)
        assert_close_tree(uploads, {n: torch.stack([u[n] for _, _, u in want]) for n in want[0][2]}, exact=True)


def test_chunks_results_come_back_in_cohort_order():
    """``in_cohort_order``: chunks run in another order (by minibatch width, then longest first) give each client's
    rows, lists and uploads at its place in the cohort."""
    from fedrun.engine.executor import CohortResult, in_cohort_order

    def part(ids):
        t = torch.tensor(ids, dtype=torch.float64)
        return CohortResult(t[:, None].repeat(1, 3), [{"id": i} for i in ids], t * 10, [f"s{i}" for i in ids],
                            {"a": t + 0.5}, [t[j : j + 1] for j in range(len(ids))])

    ran = [3, 0, 4, 1, 2]
    whole = in_cohort_order([part(ran[:2]), part(ran[2:])], ran)
    assert torch.equal(whole.updates, torch.arange(5.0, dtype=torch.float64)[:, None].repeat(1, 3))
    assert [b["id"] for b in whole.buffers] == list(range(5))
    assert torch.equal(whole.mean_loss, torch.arange(5.0, dtype=torch.float64) * 10)
    assert whole.client_states == [f"s{i}" for i in range(5)]
    assert torch.equal(whole.uploads["a"], torch.arange(5.0, dtype=torch.float64) + 0.5)
    assert [float(s) for s in whole.steps] == list(range(5))
    assert in_cohort_order([part([0, 1, 2])], [0, 1, 2]).updates[2, 0] == 2


def test_make_bench_and_make_bench_addons_run_every_workload_of_their_kind():
    """The Makefile names the bench's workloads (so that `make bench` writes the executors' table and `make
    bench-addons` the add-ons' table, as committed in results/bench/); a workload added to the bench is run by them."""
    from pathlib import Path

    from fedrun.bench.workloads import ADDON_WORKLOADS, SCALE_WORKLOADS, WORKLOADS

    lists = dict(line.split(" := ") for line in (Path(__file__).parents[1] / "Makefile").read_text().splitlines()
                 if line.startswith(("WORKLOADS := ", "ADDONS := ", "SCALE := ")))
    assert lists["WORKLOADS"].split(",") == [w.name for w in WORKLOADS]
    assert lists["ADDONS"].split(",") == [w.name for w, _ in ADDON_WORKLOADS]
    assert lists["SCALE"].split(",") == [w.name for w in SCALE_WORKLOADS]


@pytest.mark.slow  # a 100-client cohort timed under every executor: most of a minute on 2 cores
def test_the_thousand_client_workloads_run_only_when_named(tmp_path):
    """``make bench-scale``'s cohorts (1000 clients of 5 steps; a tenth with --quick) are timed when --only names
    them, never by a bench that names none."""
    import json

    from fedrun.bench.workloads import SCALE_WORKLOADS, main

    assert main(["--quick", "--only", "mlp_mnist_1000", "--repeats", "1", "--device", "cpu", "--out",
                 str(tmp_path / "b.json")]) == 0
    (mlp,) = json.loads((tmp_path / "b.json").read_text())
    assert mlp["workload"] == "mlp_mnist_1000" and mlp["clients"] == 100
    assert {w.name for w in SCALE_WORKLOADS} == {"lenet5_cifar_1000", "mlp_mnist_1000", "lenet5_mnist_160"}
    assert all((w.samples // w.batch, w.clients) == (5, 1000) for w in SCALE_WORKLOADS if w.batches is None)


def test_the_denormals_benchmark_times_both_modes_on_a_runs_own_model_and_data(monkeypatch, cfg_factory):
    """scripts/denormals_cost.py: a config's model on its client 0's minibatches, each mode timed, and the two modes'
    gradients the same to float rounding; the run's mode is set back to the config's when it is done."""
    from conftest import load_script

    tiny(monkeypatch, "tokens")
    cfg = cfg_factory(*COMMON, *FAMILIES["gru"][1], "hardware.denormals=keep")
    cfg.data.name = "tiny"
    row = load_script("denormals_cost").measure("tiny", cfg, steps=2, repeats=1)
    assert row["model"] == "gru" and row["steps"] == 2 and row["batch"] == 16
    assert min(row[f"{w}_{m}"] for w in ("step", "eval") for m in ("keep", "flush")) > 0
    assert row["difference"] < 1e-6
    assert (torch.tensor([1e-39]) * 1.5).item() != 0.0, "the config's mode (keep) again, not the last one timed"
    torch.set_flush_denormal(True)  # as a default run leaves it
