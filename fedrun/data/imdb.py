"""IMDB movie reviews (Maas et al. 2011) from the official ``aclImdb`` folder: 25k train / 25k test, binary sentiment.

Reviews are tokenised by :mod:`fedrun.data.text` with a vocabulary of the most frequent training words
(``data.vocab_size``, 1000 for BHerd's RNN) and cut to ``data.max_len`` tokens; the token arrays are cached under the
data root, keyed by those settings and the files found.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from fedrun.errors import DataMissingError
from fedrun.process.lazy import torch
from fedrun.data.base import DatasetSpec, FedDataset, cache_path, load_or_build, source_signature
from fedrun.data.download import fetcher
from fedrun.data.text import build_vocabulary, encode, words

LABELS = {"neg": 0, "pos": 1}


def find_dir(root: Path) -> Path | None:
    for d in (root / "imdb" / "aclImdb", root / "aclImdb"):
        if all((d / split / label).is_dir() for split in ("train", "test") for label in LABELS):
            return d
    return None


def is_present(root: Path) -> bool:
    return find_dir(root) is not None


def read_split(d: Path, split: str) -> tuple[list[list[str]], np.ndarray]:
    texts, labels = [], []
    for label, y in LABELS.items():
        for f in sorted((d / split / label).glob("*.txt")):
            texts.append(words(f.read_text(encoding="utf-8", errors="replace")))
            labels.append(y)
    return texts, np.asarray(labels, dtype=np.int64)


def load(root: Path, cfg) -> FedDataset:
    d = find_dir(root)
    if d is None:
        raise DataMissingError(SPEC.how_to_get.format(root=root))
    size, length = int(cfg.vocab_size), int(cfg.max_len)

    def build():
        train, y_train = read_split(d, "train")
        test, y_test = read_split(d, "test")
        vocab = build_vocabulary(train, size)
        return {"x_train": encode(train, vocab, length), "y_train": y_train, "x_test": encode(test, vocab, length),
                "y_test": y_test}

    sources = [f for s in ("train", "test") for lab in LABELS for f in (d / s / lab).glob("*.txt")]
    settings = {"source": source_signature(sources), "vocab_size": size, "max_len": length, "version": 2}
    a = load_or_build(cache_path(root / "imdb" / "cache", "imdb", settings), build)
    return FedDataset("imdb", torch.from_numpy(a["x_train"]), torch.from_numpy(a["y_train"]),
                      torch.from_numpy(a["x_test"]), torch.from_numpy(a["y_test"]), num_classes=2,
                      input_kind="tokens", source=str(d))


SPEC = DatasetSpec(
    name="imdb",
    description="IMDB reviews (aclImdb), 25k train / 25k test, word ids (data.vocab_size, data.max_len), 2 classes",
    meta=lambda cfg: ("tokens", (int(cfg.max_len),), 2),
    load=load,
    is_present=is_present,
    fetch=fetcher("imdb"),
    how_to_get=(
        "IMDB was not found in {root}/imdb/aclImdb/ or {root}/aclImdb/. Download aclImdb_v1.tar.gz from "
        "https://ai.stanford.edu/~amaas/data/sentiment/ and unpack it into {root}/imdb/ so that "
        "{root}/imdb/aclImdb/train/pos, train/neg, test/pos and test/neg hold the reviews as .txt files; on a "
        "machine that reaches ai.stanford.edu, `fedrun-data fetch imdb` does this (MD5-checked)."
    ),
)
