"""Images in channels-last memory: the same rounds as contiguous ones, entered only where they gain."""


import pytest
import torch

from fedrun.engine.run.simulation import Simulation
from executor_cases import (COMMON, tiny)


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
        sim = Simulation.from_config(cfg)
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

    assert not Simulation.from_config(cfg_factory("data=digits", "model=logreg", "hardware=cpu")).model.channels_last
    assert Simulation.from_config(cfg_factory("data=digits", "model=cnn3", "hardware=cpu")).model.channels_last
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
