"""The graph executor: static shapes, finished clients masked, minibatch indices picked on the device. Its capture
as a CUDA graph runs on a GPU only (tests/engine/execution/test_gpu.py); its bookkeeping runs here, eagerly."""

from __future__ import annotations

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from fedrun.engine.execution.graph_executor import GraphExecutor
from fedrun.engine.run.simulation import Simulation
from executor_cases import EVERY_FAMILY, assert_close_tree

RAGGED = ["data=digits", "fl.clients_per_round=4", "fl.batch_size=16", "hardware.dtype=float64", "fl.momentum=0.5",
          "partition=dirichlet", "partition.alpha=0.3", "hardware=cpu"]


@pytest.mark.parametrize("family", ["scaffold", "bherd", "perfedavg"])
@pytest.mark.parametrize("stack", ["native", "vmap"])
def test_a_ragged_cohort_gives_the_loops_rounds(cfg_factory, family, stack):
    """Clients of several step counts: a finished client's row keeps stepping and its results are discarded, so its
    state (SCAFFOLD's control variate), recorded steps (BHerd's herding) and mean loss are the loop's; so are a rule
    drawing several batches a step (Per-FedAvg), and the stack stepped natively or under vmap."""
    common = [*RAGGED, "model=mlp", *EVERY_FAMILY.get(family, [f"algo={family}"])]
    if stack == "vmap":
        common.append("hardware.gradient=autograd")  # no stacked step by hand: torch.func's vmap
    states, losses = {}, {}
    for executor in ("loop", "graph"):
        sim = Simulation.from_config(cfg_factory(*common, f"hardware.executor={executor}"))
        outs = [sim.run_round(rnd) for rnd in (1, 2)]
        states[executor], losses[executor] = vars(sim.state), [o.train_loss for o in outs]
    assert isinstance(sim.executor, GraphExecutor)
    assert len({p.tau for p in outs[0].plans}) > 2, "the case must have clients of several lengths"
    assert_close_tree(states["graph"], states["loop"])
    assert losses["graph"] == pytest.approx(losses["loop"], rel=1e-10)


def test_a_cpu_run_never_captures(cfg_factory):
    """CUDA graphs are a GPU's: on a CPU the masked steps run eagerly, whatever was asked."""
    sim = Simulation.from_config(cfg_factory(*RAGGED, "model=mlp", "hardware.executor=graph"))
    assert not sim.executor.captures(sim.model, sim.train_inputs)
    sim.executor.capture = True
    assert not sim.executor.captures(sim.model, sim.train_inputs)


def test_batchnorm_statistics_of_clients_that_finish_early_are_the_loops(monkeypatch, cfg_factory):
    """A BatchNorm model under the masked steps: a finished client's row keeps stepping, and its running statistics
    and step count must stay where its last real step left them, as its parameters do (the step updates buffers in
    place, so the mask needs the state from before the step, not the same tensors)."""
    from executor_cases import COMMON, FAMILIES, tiny

    tiny(monkeypatch, "image32")
    sims = {}
    for executor in ("loop", "graph"):
        cfg = cfg_factory(*COMMON, *FAMILIES["batchnorm_cnn"][1], f"hardware.executor={executor}")
        cfg.data.name = "tiny"
        sims[executor] = Simulation.from_config(cfg)
    outs = {executor: sim.run_round(1) for executor, sim in sims.items()}
    assert len({p.tau for p in outs["loop"].plans}) > 1, "the case must have clients of several lengths"
    loop, graph = sims["loop"].state, sims["graph"].state
    assert any("num_batches_tracked" in name for name in loop.buffers)
    for name in loop.buffers:
        torch.testing.assert_close(graph.buffers[name], loop.buffers[name], rtol=1e-9, atol=1e-10)
    torch.testing.assert_close(graph.params, loop.params, rtol=1e-9, atol=1e-10)


class FakeGraph:
    """A CUDA graph's stand-in: recording does not run the step; each replay runs it on the tensors it was given."""

    def __init__(self, step):
        self.step = step

    def replay(self):
        self.step()


class CapturingOnACpu(GraphExecutor):
    """The graph executor's control flow (warm-up, capture, replay, fallback) with CUDA's capture replaced by
    FakeGraph, so that it runs on a CPU; ``refusal``: the error every capture raises."""

    refusal: str | None = None

    def captures(self, model, x):
        return self.capture is not False

    def _warm_up(self, step, device):
        step()

    def _capture(self, step):
        if self.refusal:
            raise RuntimeError(self.refusal)
        return FakeGraph(step)


@pytest.mark.parametrize("refusal", [None, "operation not permitted when stream is capturing"])
def test_the_capture_control_flow_replays_the_captured_step_or_falls_back_and_says_so(cfg_factory, refusal):
    """Each chunk's round: one eager warm-up step, one capture, every later step a replay, and the rounds the loop's;
    a capture that fails turns capture off for the run, its steps run eagerly with the same results, and the reason
    is kept for the summary."""
    common = [*RAGGED, "model=mlp", "algo=scaffold"]
    loop = Simulation.from_config(cfg_factory(*common, "hardware.executor=loop"))
    sim = Simulation.from_config(cfg_factory(*common, "hardware.executor=graph"))
    sim.executor = CapturingOnACpu()
    sim.executor.refusal = refusal
    outs = [sim.run_round(rnd) for rnd in (1, 2)]
    for rnd in (1, 2):
        loop.run_round(rnd)
    assert_close_tree(vars(sim.state), vars(loop.state))
    longest = [max(p.tau for p in out.plans) for out in outs]  # one chunk a round here
    report = sim.executor.report()
    if refusal is None:
        assert report == {"graphs_captured": 2, "graph_replays": sum(longest) - 2, "eager_steps": 2,
                          "capture_fallback": None}
    else:
        assert report == {"graphs_captured": 0, "graph_replays": 0, "eager_steps": sum(longest),
                          "capture_fallback": refusal}
        assert sim.executor.capture is False


def test_a_runs_summary_says_whether_its_graph_steps_were_captured(cfg_factory, tmp_path):
    """summary.json carries the graph executor's record: here, a CPU, every step eager and none captured."""
    from fedrun.engine.run.experiment import run_experiment

    summary = run_experiment(cfg_factory(*RAGGED, "model=mlp", "fl.rounds=1", "hardware.executor=graph"), tmp_path)
    assert summary["graphs_captured"] == summary["graph_replays"] == 0 < summary["eager_steps"]
    assert summary["capture_fallback"] is None
    on_disk = __import__("json").loads((tmp_path / "summary.json").read_text())
    assert on_disk["eager_steps"] == summary["eager_steps"]


# what a captured step may not do: read a value on the host (a replay would not wait for it, and the decision it fed
# would be frozen at capture), draw random numbers (a replay repeats the capture's draw) or make a shape that depends
# on values (a replay keeps the capture's shapes)
HOST_READS = {"_local_scalar_dense", "equal", "allclose", "is_nonzero", "item"}
VALUE_SHAPED = {"nonzero", "masked_select", "unique", "_unique", "_unique2", "unique_dim", "unique_consecutive",
                "repeat_interleave", "bincount"}
RANDOM = ("rand", "bernoulli", "normal", "uniform", "multinomial", "dropout", "exponential", "geometric", "cauchy",
          "log_normal", "random")


class HazardProbe(TorchDispatchMode):
    """Every operation a step dispatches (beneath vmap and grad), its hazards named."""

    def __init__(self):
        super().__init__()
        self.hazards = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.overloadpacket.__name__
        if name in HOST_READS:
            self.hazards.add(f"host read: {func}")
        if name in VALUE_SHAPED:
            self.hazards.add(f"value-dependent shape: {func}")
        if any(word in name for word in RANDOM):
            self.hazards.add(f"random draw: {func}")
        return func(*args, **(kwargs or {}))


PROBED = {**{f"{family} logreg" if "model=logreg" in args else f"{family} mlp":  # FSVRG and its banks: logreg
                 args if "model=logreg" in args else ["model=mlp", *args] for family, args in EVERY_FAMILY.items()},
          **{f"{family} cnn3": ["model=cnn3", *EVERY_FAMILY.get(family, [f"algo={family}"])]
             for family in ("fedavg", "scaffold", "bherd", "fedprox", "feddyn", "dgt")}}


@pytest.mark.parametrize("case", [*PROBED, "gru", "lstm"])
def test_a_captured_step_reads_nothing_on_the_host_draws_nothing_and_keeps_its_shapes(monkeypatch, cfg_factory, case):
    """The step a graph replays, run under a dispatch-mode probe for every family on a dense model and a CNN, and on
    the recurrent models: no host read, no random draw, no value-dependent shape. The cross-entropy's all-targets-
    scored shortcut reads the targets on the host on a CPU only (its check is skipped on a GPU): the probe takes the
    GPU's path, as a GPU run would."""
    from fedrun.model import zoo
    from executor_cases import FAMILIES, tiny

    monkeypatch.setattr(zoo, "host_reads_targets", lambda y: False)
    if case in ("gru", "lstm"):
        kind, overrides = FAMILIES[case]
        tiny(monkeypatch, kind)
        cfg = cfg_factory(*RAGGED, *overrides, "hardware.executor=graph", "hardware.dtype=float32")
        cfg.data.name = "tiny"
    else:
        cfg = cfg_factory(*RAGGED, *PROBED[case], "hardware.executor=graph")
    sim = Simulation.from_config(cfg)
    probe = HazardProbe()

    class Probed(FakeGraph):
        def replay(self):
            with probe:
                self.step()

    executor = CapturingOnACpu()
    executor._capture = lambda step: Probed(step)
    sim.executor = executor
    sim.run_round(1)
    assert executor.graph_replays > 0, "the probe must have seen replayed steps"
    assert probe.hazards == set()


def test_captured_steps_get_half_the_chunk_an_eager_step_gets(cfg_factory, monkeypatch):
    """A captured step holds its intermediates in the graph's own memory pool beside the warm-up's cached ones: its
    chunks are sized from half the memory (hardware.memory_share's budget is not overrun); eager steps, as vmap's."""
    from fedrun.algorithms.base import ClientContext
    from fedrun.engine.execution import executor as ex

    sim = Simulation.from_config(cfg_factory(*RAGGED, "model=mlp", "hardware.executor=graph"))
    plan = sim.run_round(1).plans[0]
    ctx = ClientContext(1, sim.state.params, sim.state.buffers, 0.1)
    monkeypatch.setattr(ex, "free_memory_bytes", lambda device: 10**12)
    monkeypatch.setattr(ex, "last_level_cache_bytes", lambda: None)
    args = (sim.algo.local, sim.model, ctx, plan, sim.train_inputs)
    eager = ex.VmapExecutor(tail=0, blocks=False, cache_fraction=None).chunk_for(*args)
    assert GraphExecutor().chunk_for(*args) == eager > 1000
    assert CapturingOnACpu().chunk_for(*args) == eager // 2

