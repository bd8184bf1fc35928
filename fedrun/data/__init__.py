"""The dataset registry: every loader returns a :class:`FedDataset` of tensors, so partitions, models and
executors work unchanged across datasets."""

from __future__ import annotations

from typing import TYPE_CHECKING

from fedrun.errors import ConfigError
from fedrun.data import (cifar, digits, fashion_mnist, imdb, leaf, mnist, shakespeare_plays, speech_commands, synthetic,
                         tiny_imagenet, twitter)
from fedrun.data.base import DatasetSpec, FedDataset, default_root, resolve_root
from fedrun.data.hog import hog_spec

if TYPE_CHECKING:
    import torch

DATASETS: dict[str, DatasetSpec] = {
    s.name: s
    for s in (mnist.SPEC, fashion_mnist.SPEC, cifar.CIFAR10, cifar.CIFAR100, digits.SPEC, imdb.SPEC,
              speech_commands.SPEC, synthetic.LEAF, synthetic.FEDPROX, synthetic.TWO_GAUSSIANS,
              tiny_imagenet.SPEC, twitter.SPEC,
              shakespeare_plays.SPEC,
              *leaf.SPECS.values(), hog_spec(mnist.SPEC, 28, 28, "Zhao et al. Sec. V-A"),
              hog_spec(cifar.CIFAR10, 32, 32, "Zhao et al. Sec. V-A"))
}


def get_spec(name: str) -> DatasetSpec:
    try:
        return DATASETS[name]
    except KeyError:
        raise ConfigError([f"data={name!r} is not a known dataset; choose one of {sorted(DATASETS)}"]) from None


def load_dataset(data_cfg, device: torch.device | str = "cpu") -> FedDataset:
    """Load (fetching where allowed) the dataset of ``data_cfg`` and move it to ``device``."""
    spec = get_spec(data_cfg.name)
    return spec.load(resolve_root(data_cfg.root), data_cfg).to(device)


__all__ = ["DATASETS", "DatasetSpec", "FedDataset", "default_root", "get_spec", "load_dataset", "resolve_root"]
