"""Tiny-ImageNet (CS231n): 200 classes of 64x64 RGB images, from the official ``tiny-imagenet-200`` folder.

Train: ``train/<wnid>/images/*.JPEG`` (500 per class). The official test split has no labels, so fedrun tests on
``val/images/*.JPEG`` labelled by ``val/val_annotations.txt`` (file, wnid, box), as FedGH and most FL papers do.
Classes are numbered in the order of ``wnids.txt``. The decoded uint8 arrays are cached under the data root.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from fedrun.errors import DataMissingError
from fedrun.data.base import DatasetSpec, FedDataset, cache_path, image_dataset, load_or_build, source_signature
from fedrun.data.download import fetcher


def find_dir(root: Path) -> Path | None:
    for d in (root / "tiny_imagenet" / "tiny-imagenet-200", root / "tiny-imagenet-200"):
        if (d / "wnids.txt").is_file() and (d / "val" / "val_annotations.txt").is_file() and (d / "train").is_dir():
            return d
    return None


def read_images(paths: list[Path]) -> np.ndarray:
    from PIL import Image

    out = np.zeros((len(paths), 3, 64, 64), dtype=np.uint8)
    for i, p in enumerate(paths):
        with Image.open(p) as im:
            out[i] = np.asarray(im.convert("RGB").resize((64, 64))).transpose(2, 0, 1)
    return out


def load(root: Path, cfg) -> FedDataset:
    d = find_dir(root)
    if d is None:
        raise DataMissingError(SPEC.how_to_get.format(root=root))
    wnids = d.joinpath("wnids.txt").read_text().split()
    index = {w: i for i, w in enumerate(wnids)}
    train = [(p, index[w]) for w in wnids for p in sorted((d / "train" / w / "images").glob("*.JPEG"))]
    val = [(d / "val" / "images" / line.split("\t")[0], index[line.split("\t")[1]])
           for line in d.joinpath("val", "val_annotations.txt").read_text().splitlines() if line.strip()]

    def build():
        return {"x_train": read_images([p for p, _ in train]), "y_train": np.asarray([y for _, y in train], np.int64),
                "x_test": read_images([p for p, _ in val]), "y_test": np.asarray([y for _, y in val], np.int64)}

    sources = [p for p, _ in train + val] + [d / "wnids.txt", d / "val" / "val_annotations.txt"]
    settings = {"source": source_signature(sources), "version": 2}
    arrays = load_or_build(cache_path(root / "tiny_imagenet" / "cache", "tiny_imagenet", settings), build)
    return image_dataset("tiny_imagenet", arrays, len(wnids), str(d), cfg.normalize)


SPEC = DatasetSpec(
    name="tiny_imagenet",
    description="Tiny-ImageNet: 100k train / 10k val (as test), 3x64x64, 200 classes",
    meta=lambda cfg: ("image", (3, 64, 64), 200),
    load=load,
    is_present=lambda root: find_dir(root) is not None,
    fetch=fetcher("tiny_imagenet"),
    pixel_images=True,
    how_to_get=(
        "Tiny-ImageNet was not found: fedrun needs {root}/tiny_imagenet/tiny-imagenet-200/ with wnids.txt, "
        "train/<wnid>/images/*.JPEG and val/images/*.JPEG with val/val_annotations.txt. Download "
        "http://cs231n.stanford.edu/tiny-imagenet-200.zip and unzip it in {root}/tiny_imagenet/, or run "
        "`fedrun-data fetch tiny_imagenet` on a machine that reaches cs231n.stanford.edu (MD5-checked)."
    ),
)
