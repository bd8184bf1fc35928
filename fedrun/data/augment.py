"""Training-time image augmentation: torchvision's AutoAugment (Cubuk et al. 2018), as FedGH trains CIFAR-10/100
and Tiny-ImageNet (FedGH Sec. III-A, "with Autoaugment").

A DataLoader with an AutoAugment transform draws a fresh sub-policy each time a sample is loaded. fedrun keeps the
data on the device and gathers minibatches by index, so :class:`AugmentedImages` stands in for the training inputs:
``minibatch`` gathers a local step's samples and augments every one with its own draw. The draws are made for the whole
gather at once and each of the policy's (operation, magnitude, sign) groups is applied to its samples in one batched
call of torchvision's own operation, which gives per sample what ``torchvision.transforms.AutoAugment`` gives (tested
against it) at a fraction of the per-image cost. Each draw is a hash of (seed, round, local step, sample index), not
the next value of a generator: a resumed run sees the same augmentations, and so do the loop executor (client by
client) and the vmap executor (all clients' step t at once), whatever order they gather in.
"""

from __future__ import annotations

import torch

NUM_BINS = 10  # torchvision's magnitude bins for AutoAugment


def torchvision_policy(name: str):
    """torchvision's AutoAugmentPolicy of ``name`` (torchvision is imported here, by a run that augments: importing it
    costs every other process about two seconds)."""
    from torchvision.transforms import AutoAugmentPolicy

    return getattr(AutoAugmentPolicy, name.upper())


class AutoAugmentBatch:
    """AutoAugment's draw and application for a batch of uint8 images (N, C, H, W), one draw per image."""

    def __init__(self, policy: str = "cifar10"):
        from torchvision.transforms import AutoAugment, InterpolationMode

        self.reference = AutoAugment(torchvision_policy(policy), interpolation=InterpolationMode.NEAREST)
        self.policies = self.reference.policies

    def draw(self, keys: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Per image, from its 32-bit key: sub-policy index, the two operations' probability draws and sign draws
        (what ``get_params`` draws), each uniform."""
        u = [uniform(keys, stream) for stream in range(5)]
        ids = (u[0] * len(self.policies)).long().clamp_max(len(self.policies) - 1)
        return ids, torch.stack(u[1:3], dim=1), (torch.stack(u[3:5], dim=1) < 0.5).long()

    def apply(self, images: torch.Tensor, ids: torch.Tensor, probs: torch.Tensor, signs: torch.Tensor
              ) -> torch.Tensor:
        """Each image i through sub-policy ``ids[i]``: operation j applies when ``probs[i, j] <= p_j``, its
        magnitude negated when the operation is signed and ``signs[i, j] == 0`` (torchvision's rule)."""
        from torchvision.transforms.autoaugment import _apply_op

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
    """The training images as the executors see them: ``minibatch(inputs, idx, step)`` is the minibatch of a local
    step, freshly augmented; ``inputs[idx]`` the stored images, not augmented (shape probes).

    ``x`` holds images scaled as ``(pixel / 255 - mean) / std`` (per channel, ``stats``); they are mapped back to
    their uint8 pixels, augmented, and scaled again.
    """

    def __init__(self, x: torch.Tensor, stats: tuple[torch.Tensor, torch.Tensor], policy: str, seed: int):
        self.x, self.seed = x, seed
        self.mean, self.std = (s.to(x.device, x.dtype).view(1, -1, 1, 1) for s in stats)
        self.augment = AutoAugmentBatch(policy)
        self.round = 0

    def begin_round(self, rnd: int) -> None:
        self.round = rnd

    def gather(self, idx: torch.Tensor, step: int) -> torch.Tensor:
        """The samples ``idx`` (any shape) as local step ``step`` of this round trains on them: each augmented by the
        draw keyed by (seed, round, step, its index)."""
        batch = self.x[idx]
        flat = batch.reshape(-1, *self.x.shape[1:])
        pixels = ((flat * self.std + self.mean) * 255).round_().clamp_(0, 255).to(torch.uint8)
        keys = hash32(torch.as_tensor(idx).reshape(-1).long() ^ step_key(self.seed, self.round, step))
        augmented = self.augment.apply(pixels, *self.augment.draw(keys))
        return ((augmented.to(self.x.dtype) / 255 - self.mean) / self.std).reshape(batch.shape)

    def __getitem__(self, idx) -> torch.Tensor:
        return self.x[idx]

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


def minibatch(inputs, idx: torch.Tensor, step: int) -> torch.Tensor:
    """What local step ``step`` trains on: ``inputs[idx]``, augmented when the inputs are :class:`AugmentedImages`.
    Every executor gathers through here, so augmentation never depends on how clients are batched."""
    return inputs.gather(idx, step) if isinstance(inputs, AugmentedImages) else rows(inputs, idx)


def rows(t: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    """``t[idx]`` for an integer index tensor of any shape, through index_select (several times faster than
    advanced indexing on the CPU for a step's minibatch; the same values)."""
    return t.index_select(0, idx.reshape(-1)).view(*idx.shape, *t.shape[1:])


MASK32 = 0xFFFFFFFF


def _mul32(x, c: int):
    """(x * c) mod 2^32 for x in [0, 2^32) (an int, or int64 entries), in halves so no product leaves int64's range."""
    return (x * (c & 0xFFFF) + (((x * (c >> 16)) & 0xFFFF) << 16)) & MASK32


def hash32(x):
    """Wellons' lowbias32 integer hash of the low 32 bits: of an int (the per-step keys, no tensor work) or of each
    entry of an int64 tensor; in [0, 2^32)."""
    x = x & MASK32
    x = _mul32(x ^ (x >> 16), 0x7FEB352D)
    x = _mul32(x ^ (x >> 15), 0x846CA68B)
    return x ^ (x >> 16)


def step_key(seed: int, rnd: int, step: int) -> int:
    """One 32-bit key per (seed, round, local step), each part hashed in turn."""
    key = 0
    for part in (seed, rnd, step):
        key = hash32(key ^ (part & MASK32))
    return key


def uniform(keys: torch.Tensor, stream: int) -> torch.Tensor:
    """A float32 uniform on [0, 1) per key for each ``stream`` (24 bits, as ``torch.rand`` gives)."""
    return (hash32(keys ^ hash32(stream + 1)) >> 8).float() / 2**24


def training_inputs(data, data_cfg, seed: int):
    """What the executors gather training minibatches from: ``data.x_train``, or its :class:`AugmentedImages`
    under ``data.augment=autoaugment``."""
    if data_cfg.augment == "none":
        return data.x_train
    if data.pixel_stats is None:
        raise ValueError(f"data.augment: {data.name} carries no pixel statistics to augment from")
    return AugmentedImages(data.x_train, data.pixel_stats, data_cfg.augment_policy, seed)
