"""AutoAugment for FedGH's image presets: torchvision's per-image transform, applied batched to gathered minibatches."""

import pytest
import torch
from omegaconf import OmegaConf
from torchvision.transforms import AutoAugment

from fedrun.config import validate
from fedrun.data.augment import POLICIES, AugmentedImages, AutoAugmentBatch
from fedrun.data.base import scale_images
from fedrun.data.fixtures import write_cifar
from fedrun.errors import ConfigError


@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_batched_autoaugment_equals_torchvisions_transform_image_by_image(policy, monkeypatch):
    """Every sub-policy, with each operation applied or skipped and either sign, gives what
    ``torchvision.transforms.AutoAugment`` gives for the same draw."""
    batch = AutoAugmentBatch(policy)
    n_policies = len(batch.policies)
    images = torch.randint(0, 256, (4 * n_policies, 3, 32, 32), dtype=torch.uint8, generator=torch.Generator().manual_seed(0))
    ids = torch.arange(n_policies).repeat(4)
    combos = torch.tensor([[0.0, 0.0], [0.0, 1.0], [1.0, 0.0], [0.0, 0.0]]).repeat_interleave(n_policies, 0)
    probs = combos.clone()  # 0 applies every operation, 1 only those with p == 1
    signs = torch.tensor([[0, 1], [1, 0], [1, 1], [1, 1]]).repeat_interleave(n_policies, 0)
    ours = batch.apply(images, ids, probs, signs)
    reference = AutoAugment(POLICIES[policy])
    for i in range(len(images)):
        monkeypatch.setattr(AutoAugment, "get_params", staticmethod(lambda n, i=i: (int(ids[i]), probs[i], signs[i])))
        assert torch.equal(ours[i], reference(images[i])), (policy, batch.policies[int(ids[i])], probs[i], signs[i])
    assert not torch.equal(ours, images)


def test_augmented_minibatches_are_fresh_per_gather_reproducible_per_round_and_stay_on_the_pixel_grid():
    pixels = torch.randint(0, 256, (20, 3, 32, 32), dtype=torch.uint8, generator=torch.Generator().manual_seed(1))
    x, _, stats = scale_images(pixels.numpy(), pixels.numpy())
    inputs = AugmentedImages(x, stats, "cifar10", seed=0)
    idx = torch.tensor([[0, 1, 2, 3], [4, 5, 6, 7]])  # vmap's (clients, batch) gather
    inputs.begin_round(3)
    first, second = inputs[idx], inputs[idx]
    assert first.shape == (2, 4, 3, 32, 32) and not torch.equal(first, second)  # a new draw at every gather
    again = AugmentedImages(x, stats, "cifar10", seed=0)
    again.begin_round(3)
    assert torch.equal(again[idx], first)  # same seed and round: same draws (a resumed run sees the same data)
    again.begin_round(4)
    assert not torch.equal(again[idx], first)
    mean, std = (s.view(1, -1, 1, 1) for s in stats)
    back = (first.reshape(-1, 3, 32, 32) * std + mean) * 255
    assert torch.allclose(back, back.round(), atol=1e-3)  # whole pixel values: augmented uint8 images, scaled again
    changed = (back.round() != pixels[idx.flatten()].float()).flatten(1).any(1)
    assert 0 < int(changed.sum())  # some samples augmented (each sub-policy may skip both operations)


def test_fedgh_image_presets_train_with_autoaugment_and_non_pixel_data_is_refused(tmp_path, cfg_factory):
    from fedrun.engine.simulation import Simulation

    write_cifar(tmp_path / "data", "cifar10", per_file=4)
    cfg = cfg_factory("experiment=fedgh_cifar10", f"data.root={tmp_path / 'data'}", "fl.rounds=1",
                      "fl.local_epochs=1", "fl.batch_size=4")
    assert cfg.data.augment == "autoaugment" and cfg.data.augment_policy == "cifar10"
    assert cfg_factory("experiment=fedgh_tinyimagenet").data.augment_policy == "imagenet"
    assert cfg_factory("experiment=fedgh_tinyimagenet").data.augment == "autoaugment"
    trained = {}
    for augment in ("autoaugment", "none"):
        for executor in ("loop", "vmap"):
            sim = Simulation(cfg_factory("experiment=fedgh_cifar10", f"data.root={tmp_path / 'data'}", "fl.rounds=1",
                                         "fl.local_epochs=1", "fl.batch_size=4", f"data.augment={augment}",
                                         f"hardware.executor={executor}"))
            assert isinstance(sim.train_inputs, AugmentedImages) == (augment == "autoaugment")
            sim.run_round(1)
            trained[augment, executor] = sim.params
    assert all(torch.isfinite(p).all() for p in trained.values())
    torch.testing.assert_close(trained["none", "loop"], trained["none", "vmap"], atol=1e-5, rtol=1e-4)
    assert not torch.allclose(trained["autoaugment", "loop"], trained["none", "loop"], atol=1e-4)
    assert not torch.allclose(trained["autoaugment", "vmap"], trained["none", "vmap"], atol=1e-4)
    with pytest.raises(ConfigError, match=r"data.augment='autoaugment': needs images made of uint8 pixels"):
        validate(cfg_factory("data=fedprox_synthetic", "+data.augment=autoaugment"))
    with pytest.raises(ConfigError, match="data.augment_policy='mnist'"):
        validate(cfg_factory("data=cifar10", "data.augment=autoaugment", "data.augment_policy=mnist"))
    assert OmegaConf.select(cfg_factory("data=cifar10"), "data.augment") == "none"
