"""The vectorised cohort executor computes what the loop computes."""

import shutil

import pytest
import torch
from conftest import with_values

from fedrun.engine.execution.executor import VmapExecutor
from fedrun.engine.run.simulation import Simulation
from executor_cases import (BATCHNORM_ON_A_GPU, COMMON, EVERY_FAMILY, FAMILIES, assert_close_tree, tiny,
                            two_rounds)


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
        sims[executor] = Simulation.from_config(cfg)
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
    at full speed (a recurrent model's gradients decay into that range through time: scripts/bench/denormals_cost.py): a
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
        sim = Simulation.from_config(cfg)
        sim.run_round(1)
        noise = torch.randn(sim.state.params.shape, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
        sim.state.params = sim.state.params + nudge * noise
        sim.run_round(2)
        return sim.state.params

    plain = loop_after_two_rounds(0.0)
    assert torch.equal(loop_after_two_rounds(0.0), plain), "the loop repeats itself"
    assert (loop_after_two_rounds(1e-12) - plain).abs().max() > 1e-8


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
        sim = Simulation.from_config(with_values(cfg_factory(*common), *f"hardware.executor={executor}".split(",")))
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
        sim = Simulation.from_config(with_values(cfg_factory(*common), f"hardware.vmap_tail={tail}"))
        assert sim.executor.tail == tail
        plans = [sim.run_round(rnd).plans for rnd in (1, 2)]
        states[tail] = vars(sim.state)
    assert len({p.tau for p in plans[0]}) > 2, "the case must have clients of several lengths"
    assert_close_tree(states[2], states[0])
    assert_close_tree(states[4], states[0])
    assert Simulation.from_config(cfg_factory(*common[:-1])).executor.tail == 4
    assert Simulation.from_config(cfg_factory("data=digits", "model=cnn3", "hardware.executor=vmap")).executor.tail == 1


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
    from fedrun.engine.execution.executor import steps_natively

    common = ["data=digits", f"model={model}", f"algo={algo}", *more, "fl.clients_per_round=4", "fl.batch_size=16",
              "hardware.dtype=float64", "partition=dirichlet", "partition.alpha=0.3", "hardware.device=cpu"]
    descend, in_place = LocalRule.descend, {}
    states = {}
    for executor in ("loop", "vmap"):
        monkeypatch.setattr(LocalRule, "descend", staticmethod(
            lambda ctx, state, d: (in_place.setdefault(executor, set()).add(ctx.in_place), descend(ctx, state, d))))
        sim = Simulation.from_config(with_values(cfg_factory(*common), f"hardware.executor={executor}"))
        for rnd in (1, 2):
            sim.run_round(rnd)
        states[executor] = vars(sim.state)
    assert steps_natively(sim.algo.local, sim.model)
    assert in_place == {"loop": {False}, "vmap": {True}}
    assert_close_tree(states["vmap"], states["loop"])
    for other in ("scaffold", "feddecorr"):
        sim = Simulation.from_config(cfg_factory("data=digits", f"model={model}", f"algo={other}"))
        assert not steps_natively(sim.algo.local, sim.model)
    sim = Simulation.from_config(cfg_factory(*common, "hardware.cohort_network=false", "hardware.gradient=autograd"))
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
        sim = Simulation.from_config(cfg_factory(*common,
                                                 *([f"hardware.vmap_tail={tail}"] if tail is not None else [])))
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
    from fedrun.engine.execution import blocked

    # lr 0.01: at 0.1, momentum 0.9 on single samples is chaotic and grows float64 rounding to 0.1 in two rounds
    common = ["data=digits", f"model={model}", f"algo={algo}", *more, "fl.clients_per_round=4", "fl.lr=0.01",
              f"fl.batch_size={batch}", "hardware.dtype=float64", "partition=dirichlet", "partition.alpha=0.3"]
    states, losses = {}, {}
    for executor in ("loop", "vmap"):
        sim = Simulation.from_config(with_values(cfg_factory(*common), f"hardware.executor={executor}"))
        outs = [sim.run_round(rnd) for rnd in (1, 2)]
        states[executor], losses[executor] = vars(sim.state), [o.result.mean_loss for o in outs]
    plans = outs[0].plans
    assert len({p.tau % blocked.block_length(sim.algo.local, sim.model, batch) for p in plans}) > 1
    assert blocked.block_length(sim.algo.local, sim.model, batch) > 0
    assert_close_tree(states["vmap"], states["loop"])
    assert_close_tree(losses["vmap"], losses["loop"], "losses")
    for other, width in (("scaffold", 1), ("fedavg", 16)):  # its own terms; minibatches that are products already
        sim = Simulation.from_config(cfg_factory("data=digits", f"model={model}", f"algo={other}"))
        assert blocked.block_length(sim.algo.local, sim.model, width) == 0
    sim = Simulation.from_config(cfg_factory("data=digits", "model=mlp"))
    assert blocked.block_length(sim.algo.local, sim.model, 1) == 0  # two layers: outputs not affine in the weights
    assert not Simulation.from_config(cfg_factory(*common, "hardware.executor=vmap",
                                                  "hardware.blocks=false")).executor.blocks


def test_local_sgd_runs_in_blocks_of_steps_on_a_cpu_only(cfg_factory, monkeypatch, tmp_path):
    """hardware.blocks=true pays on a CPU; on a GPU a block's steps are as many launches of smaller kernels and step
    by step was faster (results/bench/gpu.md): a GPU run's vmap executor steps one by one, and the bench's vmap
    column is step by step there, with the blocks timed beside it (on a CPU: the other way round)."""
    import json

    from fedrun.bench import workloads as bench
    from fedrun.config.compose import option
    from fedrun.engine.execution.executor_choice import make_executor

    sim = Simulation.from_config(cfg_factory("data=digits", "model=logreg", "fl.batch_size=1",
                                             "hardware.executor=vmap"))
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
    from fedrun.engine.execution import tree
    from fedrun.engine.execution.executor import initial_states

    sim = Simulation.from_config(cfg_factory("data=digits", "model=mlp", f"algo={algo}", "fl.momentum=0.9"))
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
    sim = Simulation.from_config(cfg_factory("data=digits", f"model={model}", *COMMON, "fl.num_clients=12",
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
    sim = Simulation.from_config(compose_config([
        "data=leaf_reddit", f"data.root={tmp_path / 'fixture'}", *overrides, "data.vocab_size=6", "partition=natural",
        "model=lstm_lm", "model.hidden=8", f"eval.batch_size={budget}", "hardware=cpu", "hardware.dtype=float64"]))
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

    from fedrun.engine.execution.executor import flops_per_step
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
            sim = Simulation.from_config(cfg_factory(*common, f"hardware.loop_threads={threads}"))
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
    import fedrun.engine.execution.executor as executor

    started, train = [], executor._train_client
    monkeypatch.setattr(executor, "_train_client", lambda rule, model, ctx, plan, *rest: started.append(plan.tau)
                        or train(rule, model, ctx, plan, *rest))
    sim = Simulation.from_config(cfg_factory("data=digits", "model=logreg", "partition=dirichlet",
                                             "hardware.executor=loop",
                                             "hardware.loop_threads=2", "fl.num_clients=6", "fl.clients_per_round=6"))
    sim.run_round(1)
    assert len(set(started)) > 2, "clients of different lengths"
    assert sorted(started[:2]) == sorted(started)[-2:]


def test_the_loop_runs_clients_in_threads_only_where_their_draws_cannot_depend_on_timing(cfg_factory):
    from fedrun.errors import ConfigError

    torch_threads = torch.get_num_threads()
    sim = Simulation.from_config(cfg_factory("data=digits", "model=cnn3", "hardware.executor=loop",
                                             "fl.clients_per_round=5",
                                             "hardware.device=cpu"))
    assert sim.executor.threads == max(1, min(torch_threads, 5))  # auto: one client per intra-op thread
    dropout = ["data=digits", "model=cnn_reddi", "hardware.executor=loop", "hardware.device=cpu"]
    # dropout draws from one shared generator
    assert Simulation.from_config(cfg_factory(*dropout)).executor.threads == 1
    with pytest.raises(ConfigError, match="hardware.loop_threads=2: the model has Dropout"):
        Simulation.from_config(cfg_factory(*dropout, "hardware.loop_threads=2"))
