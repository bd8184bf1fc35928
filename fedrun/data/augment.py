"""Training-time image augmentation: torchvision's AutoAugment (Cubuk et al. 2018), as FedGH trains CIFAR-10/100
and Tiny-ImageNet (FedGH Sec. III-A, "with Autoaugment").

A DataLoader with an AutoAugment transform draws a fresh sub-policy each time a sample is loaded. fedrun keeps the
data on the device and gathers minibatches by index, so :class:`AugmentedImages` stands in for the training inputs:
indexing it gathers the minibatch and augments every sample with its own draw. The draws are made for the whole
gather at once and each of the policy's (operation, magnitude, sign) groups is applied to its samples in one batched
call of torchvision's own operation, which gives per sample what ``torchvision.transforms.AutoAugment`` gives (tested
against it) at a fraction of the per-image cost. Draws are seeded by (seed, round, gather), so a run and its resumed
copy see the same augmentations; the loop and vmap executors gather in different orders, so their draws differ.
"""

from __future__ import annotations

import torch
from torchvision.transforms import AutoAugment, AutoAugmentPolicy, InterpolationMode
from torchvision.transforms.autoaugment import _apply_op

AUGMENTS = ("none", "autoaugment")
POLICIES = {"cifar10": AutoAugmentPolicy.CIFAR10, "imagenet": AutoAugmentPolicy.IMAGENET,
            "svhn": AutoAugmentPolicy.SVHN}
NUM_BINS = 10  # torchvision's magnitude bins for AutoAugment


class AutoAugmentBatch:
    """AutoAugment's draw and application for a batch of uint8 images (N, C, H, W), one draw per image."""

    def __init__(self, policy: str = "cifar10"):
        self.reference = AutoAugment(POLICIES[policy], interpolation=InterpolationMode.NEAREST)
        self.policies = self.reference.policies

    def draw(self, n: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Per image: sub-policy index, the two operations' probability draws and sign draws (as ``get_params``)."""
        return (torch.randint(len(self.policies), (n,), generator=generator), torch.rand(n, 2, generator=generator),
                torch.randint(2, (n, 2), generator=generator))

    def apply(self, images: torch.Tensor, ids: torch.Tensor, probs: torch.Tensor, signs: torch.Tensor
              ) -> torch.Tensor:
        """Each image i through sub-policy ``ids[i]``: operation j applies when ``probs[i, j] <= p_j``, its
        magnitude negated when the operation is signed and ``signs[i, j] == 0`` (torchvision's rule)."""
        out = images.clone()
        space = self.reference._augmentation_space(NUM_BINS, tuple(images.shape[-2:]))
        ids, probs, signs = ids.to(images.device), probs.to(images.device), signs.to(images.device)
        for slot in (0, 1):
            for pid, policy in enumerate(self.policies):
                name, p, magnitude_id = policy[slot]
                magnitudes, signed = space[name]
                chosen = (ids == pid) & (probs[:, slot] <= p)
                for sign in ((0, 1) if signed else (None,)):
                    rows = chosen if sign is None else chosen & (signs[:, slot] == sign)
                    if not bool(rows.any()):
                        continue
                    magnitude = float(magnitudes[magnitude_id]) if magnitude_id is not None else 0.0
                    if sign == 0:
                        magnitude = -magnitude
                    out[rows] = _apply_op(out[rows], name, magnitude, interpolation=self.reference.interpolation,
                                          fill=None)
        return out


class AugmentedImages:
    """The training images as the executors see them: ``x[idx]`` is the minibatch, freshly augmented.

    ``x`` holds images scaled as ``(pixel / 255 - mean) / std`` (per channel, ``stats``); they are mapped back to
    their uint8 pixels, augmented, and scaled again.
    """

    def __init__(self, x: torch.Tensor, stats: tuple[torch.Tensor, torch.Tensor], policy: str, seed: int):
        self.x, self.seed = x, seed
        self.mean, self.std = (s.to(x.device, x.dtype).view(1, -1, 1, 1) for s in stats)
        self.augment = AutoAugmentBatch(policy)
        self.round, self.gathers = 0, 0

    def begin_round(self, rnd: int) -> None:
        self.round, self.gathers = rnd, 0

    def __getitem__(self, idx: torch.Tensor) -> torch.Tensor:
        batch = self.x[idx]
        flat = batch.reshape(-1, *self.x.shape[1:])
        pixels = ((flat * self.std + self.mean) * 255).round_().clamp_(0, 255).to(torch.uint8)
        generator = torch.Generator().manual_seed(hash((self.seed, self.round, self.gathers)) & (2**63 - 1))
        self.gathers += 1
        augmented = self.augment.apply(pixels, *self.augment.draw(len(pixels), generator))
        return ((augmented.to(self.x.dtype) / 255 - self.mean) / self.std).reshape(batch.shape)

    def __len__(self) -> int:
        return len(self.x)

    @property
    def device(self) -> torch.device:
        return self.x.device

    @property
    def dtype(self) -> torch.dtype:
        return self.x.dtype

    @property
    def shape(self) -> torch.Size:
        return self.x.shape


def training_inputs(data, data_cfg, seed: int):
    """What the executors gather training minibatches from: ``data.x_train``, or its :class:`AugmentedImages`
    under ``data.augment=autoaugment``."""
    if data_cfg.get("augment", "none") == "none":
        return data.x_train
    if data.pixel_stats is None:
        raise ValueError(f"data.augment: {data.name} carries no pixel statistics to augment from")
    return AugmentedImages(data.x_train, data.pixel_stats, data_cfg.get("augment_policy", "cifar10"), seed)
