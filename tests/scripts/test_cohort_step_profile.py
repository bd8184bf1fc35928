"""scripts/bench/cohort_step_profile.py: its convolutions' GFLOP/s count the FLOPs that torch's own counter counts."""

import pytest
from conftest import load_script
from torch.utils.flop_counter import FlopCounterMode


@pytest.mark.parametrize("k", [1, 3])
@pytest.mark.parametrize("fused", [True, False])
def test_the_convolutions_flops_are_k_times_torchs_count_for_one_clients_step(k, fused):
    """Forward and backward convolutions of one step (the first layer's backward computes its weight gradient
    alone, the images needing none), matched to their shapes as the profiler records them: K clients' grouped
    convolutions, K times one client's (torch's counter multiplies a grouped weight gradient by the groups once
    more, so it counts the lone client's plain step, which has no fused layer for it to miss); the fused first
    layer's forward and backward count as the convolution's."""
    script = load_script("cohort_step_profile")
    _, rows = script.profile(k, steps=1, fused=fused)
    step = script.lenet5_step(1, fused=False)
    step()
    with FlopCounterMode(display=False) as counter:
        step()
    convolutions = sum(n for op, n in counter.get_flop_counts()["Global"].items() if "convolution" in str(op))
    assert convolutions > 0
    assert sum(flops for _, _, _, flops in rows if flops is not None) == pytest.approx(k * convolutions)
    assert sum(flops is not None for _, _, _, flops in rows) == 4  # two layers, forward and backward each
