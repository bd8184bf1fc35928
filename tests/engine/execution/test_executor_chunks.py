"""A cohort in chunks: sized from free memory and the last-level cache, and their results as a whole cohort's, in
cohort order."""


import pytest
import torch

from fedrun.engine.run.simulation import Simulation
from executor_cases import (COMMON, EVERY_FAMILY, assert_close_tree, two_rounds)


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
    from fedrun.engine.execution import executor as ex

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
    from fedrun.engine.execution import executor as ex

    sim = Simulation.from_config(cfg_factory(*COMMON, "data=digits", *overrides, "hardware.executor=vmap"))
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
    from fedrun.engine.execution import executor as ex

    monkeypatch.setattr(ex, "last_level_cache_bytes", lambda: 2**20)  # half a MiB: the 2NN's clients one by one
    chunks = []
    chunk_for = ex.VmapExecutor.chunk_for
    monkeypatch.setattr(ex.VmapExecutor, "chunk_for", lambda *a, **k: chunks.append(chunk_for(*a, **k)) or chunks[-1])
    chunked, _ = two_rounds(cfg_factory, ["data=digits", "model=mlp"], "vmap")
    whole, _ = two_rounds(cfg_factory, ["data=digits", "model=mlp"], "vmap", cache_fraction="null")
    assert chunks[:2] == [1, 1] and chunks[2] > 5  # the chunked run's two rounds, then the whole cohort's
    torch.testing.assert_close(chunked.state.params, whole.state.params, rtol=1e-5, atol=1e-6)


def test_the_last_level_cache_is_read_from_sysfs(tmp_path):
    from fedrun.engine.execution.executor import last_level_cache_bytes

    for index, size in (("index0", "48K"), ("index2", "1024K"), ("index3", "32768K")):
        (tmp_path / index).mkdir()
        (tmp_path / index / "size").write_text(size + "\n")
    assert last_level_cache_bytes(tmp_path) == 32 * 2**20
    assert last_level_cache_bytes(tmp_path / "absent") is None


@pytest.mark.parametrize("family", ["fedavg", "fednova", "scaffold", "feddyn", "mimesvrg", "fsvrg"])
def test_a_chunks_clients_finish_in_one_stacked_call_as_each_by_itself(cfg_factory, family):
    """``stacked_final``: the updates, new client states and uploads of every client's own ``client_final`` on its
    row, bit for bit, whether no client, every client or some (the per-client way) bring a state of their own
    (after a round: SCAFFOLD's c_i, FedDyn's g_i, MimeSVRG's h, FSVRG's statics)."""
    from fedrun.algorithms.base import ClientContext
    from fedrun.engine.execution import tree
    from fedrun.engine.execution.executor import stacked_final

    overrides = ["data=digits", "model=logreg", "fl.num_clients=6", "fl.clients_per_round=6",
                 *EVERY_FAMILY.get(family, [f"algo={family}"])]
    sim = Simulation.from_config(cfg_factory(*overrides))
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
    from fedrun.algorithms.base import CohortResult
    from fedrun.engine.execution.executor import in_cohort_order

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
