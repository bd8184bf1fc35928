"""scripts/bench/indexed_rows_shapes.py: every shape it lists takes the kernel's step, timed against the gathered
one."""

import pytest
from conftest import load_script

from fedrun.model.native import indexed_rows

pytestmark = pytest.mark.skipif(not indexed_rows.enabled(), reason="the kernel cannot be built here (no g++ or ninja)")


def test_each_shape_times_the_rows_in_place_against_the_gathered_minibatch(monkeypatch):
    """For every shape (at a minibatch's worth of samples per client), the round timed as ``in_place`` reads its
    rows in place and the one timed as ``gathered`` does not, the same vmap executor for both; the kernel's step
    runs in one and not the other."""
    from fedrun.bench import workloads as bench

    script = load_script("indexed_rows_shapes")
    seen = []

    def time_rounds(executors, rule, model, ctx, plans, x, y, repeats, models, label):
        forms = {name: models.get(name, model) for name in executors}
        seen.append((label, {name: f.reads_rows(x) for name, f in forms.items()},
                     {type(e).__name__ for e in executors.values()}))
        return {"in_place": 1.0, "gathered": 2.0}, {}, {}

    monkeypatch.setattr(bench, "time_rounds", time_rounds)
    for name, model_name, shape, classes, clients, _, batch, _ in script.SHAPES:
        assert script.time_shape(name, model_name, shape, classes, clients, batch, batch, 1) == (1.0, 2.0)
    assert [s[0] for s in seen] == [s[0] for s in script.SHAPES]
    assert all(s[1] == {"in_place": True, "gathered": False} and s[2] == {"VmapExecutor"} for s in seen)
