"""AutoAugment for FedGH's image presets: torchvision's per-image transform, applied batched to gathered minibatches."""

import pytest
import torch
from omegaconf import OmegaConf
from torchvision.transforms import AutoAugment

from fedrun.config.checks import validate
from fedrun.config.schema import POLICIES
from fedrun.data.augment import (AugmentedImages, AutoAugmentBatch, hash32, minibatch, step_key,
                                 torchvision_policy)
from fedrun.data.base import scale_images
from fedrun.data.fixtures import write_cifar
from fedrun.errors import ConfigError


@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_batched_autoaugment_equals_torchvisions_transform_image_by_image(policy, monkeypatch):
    """Every sub-policy, with each operation applied or skipped and either sign, gives what
    ``torchvision.transforms.AutoAugment`` gives for the same draw."""
    batch = AutoAugmentBatch(policy)
    n_policies = len(batch.policies)
    images = torch.randint(0, 256, (4 * n_policies, 3, 32, 32), dtype=torch.uint8,
                           generator=torch.Generator().manual_seed(0))
    ids = torch.arange(n_policies).repeat(4)
    combos = torch.tensor([[0.0, 0.0], [0.0, 1.0], [1.0, 0.0], [0.0, 0.0]]).repeat_interleave(n_policies, 0)
    probs = combos.clone()  # 0 applies every operation, 1 only those with p == 1
    signs = torch.tensor([[0, 1], [1, 0], [1, 1], [1, 1]]).repeat_interleave(n_policies, 0)
    ours = batch.apply(images, ids, probs, signs)
    reference = AutoAugment(torchvision_policy(policy))
    for i in range(len(images)):
        monkeypatch.setattr(AutoAugment, "get_params", staticmethod(lambda n, i=i: (int(ids[i]), probs[i], signs[i])))
        assert torch.equal(ours[i], reference(images[i])), (policy, batch.policies[int(ids[i])], probs[i], signs[i])
    assert not torch.equal(ours, images)


def test_augmented_minibatches_are_keyed_by_round_step_and_sample_and_stay_on_the_pixel_grid():
    pixels = torch.randint(0, 256, (20, 3, 32, 32), dtype=torch.uint8, generator=torch.Generator().manual_seed(1))
    x, _, stats = scale_images(pixels.numpy(), pixels.numpy())
    inputs = AugmentedImages(x, stats, "cifar10", seed=0)
    idx = torch.tensor([[0, 1, 2, 3], [4, 5, 6, 7]])  # vmap's (clients, batch) gather of step t
    inputs.begin_round(3)
    first = minibatch(inputs, idx, 0)
    assert first.shape == (2, 4, 3, 32, 32) and not torch.equal(first, minibatch(inputs, idx, 1))  # new step: new draws
    # the loop executor's gathers (client by client, in any order) get the same draws as vmap's one gather
    assert torch.equal(minibatch(inputs, idx[1], 0), first[1]) and torch.equal(minibatch(inputs, idx[0], 0), first[0])
    assert torch.equal(minibatch(inputs, idx[0, [2, 0]], 0), first[0, [2, 0]])
    again = AugmentedImages(x, stats, "cifar10", seed=0)
    again.begin_round(3)
    assert torch.equal(minibatch(again, idx, 0), first)  # same seed and round: same draws (a resumed run)
    again.begin_round(4)
    assert not torch.equal(minibatch(again, idx, 0), first)
    assert not torch.equal(minibatch(AugmentedImages(x, stats, "cifar10", seed=1), idx, 0), first)
    assert torch.equal(inputs[idx], x[idx])  # indexing gives the stored images (shape probes), not augmented
    mean, std = (s.view(1, -1, 1, 1) for s in stats)
    back = (first.reshape(-1, 3, 32, 32) * std + mean) * 255
    assert torch.allclose(back, back.round(), atol=1e-3)  # whole pixel values: augmented uint8 images, scaled again
    changed = (back.round() != pixels[idx.flatten()].float()).flatten(1).any(1)
    assert 0 < int(changed.sum())  # some samples augmented (each sub-policy may skip both operations)


def test_hashed_draws_are_uniform_like_autoaugments_own():
    """AutoAugment's get_params draws a sub-policy uniformly, two probabilities in [0, 1) and two fair signs."""
    batch = AutoAugmentBatch("cifar10")
    n = 200_000
    keys = hash32(torch.arange(n) ^ step_key(0, 1, 0))
    ids, probs, signs = batch.draw(keys)
    counts = torch.bincount(ids, minlength=len(batch.policies)).double()
    expected = n / len(batch.policies)
    assert float(((counts - expected) ** 2 / expected).sum()) < 60  # chi-square, 24 dof: p ~ 1e-4 at 60
    assert float(probs.min()) >= 0 and float(probs.max()) < 1
    assert abs(float(probs.mean()) - 0.5) < 0.005 and abs(float(probs.std()) - 12 ** -0.5) < 0.005
    assert abs(float(torch.corrcoef(probs.T)[0, 1])) < 0.01  # the two operations draw independently
    assert abs(float(signs.double().mean()) - 0.5) < 0.005


def test_fedgh_image_presets_train_with_autoaugment_and_non_pixel_data_is_refused(tmp_path, cfg_factory):
    from fedrun.engine.run.simulation import Simulation

    write_cifar(tmp_path / "data", "cifar10", per_file=4)
    cfg = cfg_factory("experiment=fedgh_cifar10", f"data.root={tmp_path / 'data'}", "fl.rounds=1",
                      "fl.local_epochs=1", "fl.batch_size=4")
    assert cfg.data.augment == "autoaugment" and cfg.data.augment_policy == "cifar10"
    assert cfg_factory("experiment=fedgh_tinyimagenet").data.augment_policy == "imagenet"
    assert cfg_factory("experiment=fedgh_tinyimagenet").data.augment == "autoaugment"
    trained = {}
    for augment in ("autoaugment", "none"):
        for executor in ("loop", "vmap"):
            sim = Simulation.from_config(cfg_factory("experiment=fedgh_cifar10", f"data.root={tmp_path / 'data'}",
                                                     "fl.rounds=1",
                                                     "fl.local_epochs=1", "fl.batch_size=4", f"data.augment={augment}",
                                                     f"hardware.executor={executor}"))
            assert isinstance(sim.train_inputs, AugmentedImages) == (augment == "autoaugment")
            sim.run_round(1)
            trained[augment, executor] = sim.state.params
    assert all(torch.isfinite(p).all() for p in trained.values())
    torch.testing.assert_close(trained["none", "loop"], trained["none", "vmap"], atol=1e-5, rtol=1e-4)
    # the same augmentations whichever executor gathers them
    torch.testing.assert_close(trained["autoaugment", "loop"], trained["autoaugment", "vmap"], atol=1e-5, rtol=1e-4)
    assert not torch.allclose(trained["autoaugment", "loop"], trained["none", "loop"], atol=1e-4)
    assert not torch.allclose(trained["autoaugment", "vmap"], trained["none", "vmap"], atol=1e-4)
    with pytest.raises(ConfigError, match=r"data.augment='autoaugment': needs images made of uint8 pixels"):
        validate(cfg_factory("data=fedprox_synthetic", "data.augment=autoaugment"))
    with pytest.raises(ConfigError, match="data.augment_policy='mnist'"):
        validate(cfg_factory("data=cifar10", "data.augment=autoaugment", "data.augment_policy=mnist"))
    assert OmegaConf.select(cfg_factory("data=cifar10"), "data.augment") == "none"
