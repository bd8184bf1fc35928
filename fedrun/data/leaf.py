"""LEAF benchmark tasks (Caldas et al. 2018) from the JSON files LEAF's preprocessing writes: FEMNIST, Shakespeare,
Sent140, CelebA and Reddit (and LEAF Synthetic's feature vectors, read by ``data=leaf_synthetic data.source=json``).

LEAF writes ``data/<task>/data/train/*.json`` and ``data/<task>/data/test/*.json``, each
``{"users": [...], "num_samples": [...], "user_data": {user: {"x": [...], "y": [...]}}}``. fedrun reads every file
of both splits; LEAF's users become ``train_users``/``test_users`` (``partition=natural`` makes them the clients and
the metric ``local_acc`` averages over them). How ``x`` and ``y`` are decoded depends on the task:

- FEMNIST: 784 floats per image -> (1, 28, 28); 62 classes.
- Shakespeare: 80 characters -> indices into LEAF's 80-letter alphabet; the next character is the label.
- Sent140: the tweet's text (field 4 of ``x``) -> word ids over the training vocabulary (``data.vocab_size``,
  ``data.max_len``, as for IMDB); label 0/1.
- CelebA: an image file name under ``data/celeba/data/raw/img_align_celeba/`` -> RGB resized to 84 x 84 (LEAF's
  size), pixels in [0, 1]; label 0/1 (smiling).
- Reddit: each comment is a list of 10-token sequences (``<BOS>`` words ``<EOS>``, padded with ``<PAD>``) and its
  label holds the next-token targets (``target_tokens``) and which count (``count_tokens``), as LEAF's
  ``data/reddit/source/preprocess.py`` writes them. fedrun's samples are the sequences (what LEAF's model batches):
  x = token ids (N, 10), y = target ids (N, 10) with -100 where ``count_tokens`` is 0. The vocabulary is LEAF's
  ``build_vocab.py``: the ``data.vocab_size`` - 2 most frequent training tokens (padding 0, unknown 1).

The decoded arrays are cached under the data root, keyed by the files found and the settings.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from fedrun.errors import DataMissingError
from fedrun.process.lazy import torch
from fedrun.data.base import IGNORE, DatasetSpec, FedDataset, cache_path, load_or_build, source_signature
from fedrun.data.text import OOV, PAD, build_vocabulary, encode, words

# LEAF's models/shakespeare alphabet (utils/language_utils.py ALL_LETTERS)
LETTERS = "\n !\"&'(),-.0123456789:;>?ABCDEFGHIJKLMNOPQRSTUVWXYZ[]abcdefghijklmnopqrstuvwxyz}"
CELEBA_SIZE = 84


def task_dir(root: Path, task: str) -> Path:
    return root / "leaf" / task / "data"


def json_files(root: Path, task: str) -> dict[str, list[Path]]:
    d = task_dir(root, task)
    return {split: sorted((d / split).glob("*.json")) for split in ("train", "test")}


def source_files(root: Path, task: str) -> dict[str, list[Path]] | None:
    """What a task is read from: its train and test JSON files, and for CelebA the folder of the images they name
    (under "images": a folder's entry changes when files come, go or are replaced, so it keys the cache too); None if
    any is missing."""
    files = json_files(root, task)
    images = task_dir(root, task) / "raw" / "img_align_celeba"
    if not (files["train"] and files["test"]) or (task == "celeba" and not images.is_dir()):
        return None
    return files | {"images": [images] if task == "celeba" else []}


def is_present_for(task: str) -> Callable:
    def present(root: Path) -> bool:
        return source_files(root, task) is not None

    return present


def read_users(files: list[Path]) -> list[tuple[str, list, list]]:
    """(user, xs, ys) for every user of the files, in file order."""
    out = []
    for path in files:
        blob = json.loads(path.read_text())
        for user in blob["users"]:
            data = blob["user_data"][user]
            out.append((user, data["x"], data["y"]))
    return out


def letter_index(text: str) -> list[int]:
    idx = [LETTERS.find(ch) for ch in text]
    if -1 in idx:
        raise ValueError(f"Shakespeare: character {text[idx.index(-1)]!r} is not in LEAF's alphabet")
    return idx


@dataclass(frozen=True)
class Task:
    name: str
    kind: str
    classes: int
    description: str
    raw: str = ""  # extra files the task needs beside the JSON (how_to_get says where)


TASKS = {
    "femnist": Task("femnist", "image", 62, "LEAF FEMNIST: 28x28 handwritten characters by writer, 62 classes"),
    "shakespeare": Task("shakespeare", "tokens", len(LETTERS),
                        "LEAF Shakespeare: next character after 80, by speaking role, 80 classes"),
    "sent140": Task("sent140", "tokens", 2, "LEAF Sent140: tweet sentiment by Twitter user, word ids, 2 classes"),
    "celeba": Task("celeba", "image", 2, "LEAF CelebA: 84x84 faces by celebrity, smiling or not, 2 classes",
                   raw="and the aligned images in {root}/leaf/celeba/data/raw/img_align_celeba/"),
    "reddit": Task("reddit", "tokens", 0, "LEAF Reddit: next word of each 10-token sequence, by Reddit user "
                   "(classes: data.vocab_size)"),
}
REDDIT_SEQ_LEN = 10
PAD_TOKEN = "<PAD>"


def num_classes(task: str, cfg) -> int:
    return int(cfg.vocab_size) if task == "reddit" else TASKS[task].classes


def comments_to_sequences(rows: list) -> list:
    """Reddit users' comments -> one row per 10-token sequence: (user, sequences, (targets, counts) per sequence)."""
    out = []
    for user, comments, labels in rows:
        seqs = [seq for comment in comments for seq in comment]
        targets = [(t, c) for label in labels for t, c in zip(label["target_tokens"], label["count_tokens"])]
        out.append((user, seqs, targets))
    return out


def decode(task: str, root: Path, cfg, train: list, test: list) -> dict[str, np.ndarray]:
    """Arrays x_train, y_train, u_train, x_test, y_test, u_test from the users' raw x/y lists."""
    users = {u: i for i, u in enumerate(dict.fromkeys(u for u, _, _ in train + test))}
    if task == "reddit":
        train, test = comments_to_sequences(train), comments_to_sequences(test)

    def stack(rows, fn):
        return np.stack([fn(x) for _, xs, _ in rows for x in xs]) if rows else np.zeros((0,))

    out = {}
    for split, rows in (("train", train), ("test", test)):
        out[f"u_{split}"] = np.asarray([users[u] for u, xs, _ in rows for _ in xs], dtype=np.int64)
        ys = [y for _, _, ys in rows for y in ys]
        if task == "femnist":
            out[f"x_{split}"] = stack(rows, lambda x: np.asarray(x, np.float32).reshape(1, 28, 28))
        elif task == "synthetic":  # LEAF Synthetic's feature vectors (data=leaf_synthetic data.source=json)
            out[f"x_{split}"] = stack(rows, lambda x: np.asarray(x, np.float32))
        elif task == "shakespeare":
            out[f"x_{split}"] = stack(rows, lambda x: np.asarray(letter_index(x), np.int64))
            ys = [letter_index(y)[0] for y in ys]
        elif task == "celeba":
            from PIL import Image

            images = task_dir(root, "celeba") / "raw" / "img_align_celeba"

            def load_image(name):
                with Image.open(images / name) as im:
                    im = im.convert("RGB").resize((CELEBA_SIZE, CELEBA_SIZE))
                    return np.asarray(im, np.float32).transpose(2, 0, 1) / 255.0

            out[f"x_{split}"] = stack(rows, load_image)
        if task != "reddit":  # Reddit's targets are token sequences, encoded below with its vocabulary
            out[f"y_{split}"] = np.asarray(ys, dtype=np.int64)
    if task == "sent140":
        texts = {s: [words(x[4]) for _, xs, _ in rows for x in xs] for s, rows in (("train", train), ("test", test))}
        vocab = build_vocabulary(texts["train"], int(cfg.vocab_size))
        for s in ("train", "test"):
            out[f"x_{s}"] = encode(texts[s], vocab, int(cfg.max_len))
    if task == "reddit":
        vocab = build_vocabulary(([w for w in seq if w != PAD_TOKEN] for _, seqs, _ in train for seq in seqs),
                                 num_classes(task, cfg))
        vocab[PAD_TOKEN] = PAD

        def ids(seq):
            return [vocab.get(w, OOV) for w in seq]

        for s, rows in (("train", train), ("test", test)):
            out[f"x_{s}"] = np.asarray([ids(seq) for _, seqs, _ in rows for seq in seqs], np.int64).reshape(
                -1, REDDIT_SEQ_LEN)
            out[f"y_{s}"] = np.asarray([[t if c else IGNORE for t, c in zip(ids(targets), counts)]
                                        for _, _, ys in rows for targets, counts in ys], np.int64).reshape(
                -1, REDDIT_SEQ_LEN)
    return out


def loader(task: str) -> Callable:
    def load(root: Path, cfg) -> FedDataset:
        spec = SPECS[task]
        files = source_files(root, task)
        if files is None:
            raise DataMissingError(spec.how_to_get.format(root=root))
        settings = {"source": source_signature(files["train"] + files["test"] + files["images"]),
                    "vocab_size": cfg.vocab_size, "max_len": cfg.max_len, "version": 2}
        a = load_or_build(cache_path(task_dir(root, task) / "cache", task, settings),
                          lambda: decode(task, root, cfg, read_users(files["train"]), read_users(files["test"])))
        return FedDataset(f"leaf_{task}", torch.from_numpy(a["x_train"]), torch.from_numpy(a["y_train"]),
                          torch.from_numpy(a["x_test"]), torch.from_numpy(a["y_test"]),
                          num_classes=num_classes(task, cfg),
                          input_kind=TASKS[task].kind, train_users=a["u_train"], test_users=a["u_test"],
                          source=str(task_dir(root, task)))

    return load


def _meta(task: str) -> Callable:
    def meta(cfg):
        if task == "sent140":
            shape = (int(cfg.max_len),)
        else:
            shape = {"femnist": (1, 28, 28), "shakespeare": (80,), "celeba": (3, CELEBA_SIZE, CELEBA_SIZE),
                     "reddit": (REDDIT_SEQ_LEN,)}[task]
        return TASKS[task].kind, shape, num_classes(task, cfg)

    return meta


def _how_to_get(task: Task) -> str:
    if task.name == "reddit":
        return ("LEAF reddit was not found: expected LEAF's JSON files in {root}/leaf/reddit/data/train/*.json and "
                "{root}/leaf/reddit/data/test/*.json. LEAF hosts Reddit already preprocessed (see "
                "data/reddit/README.md of https://github.com/TalwalkarLab/leaf: the subsampled data behind its "
                "'download the data here' link); unpack it and copy its train and test folders (each *.json with "
                "users, num_samples, user_data) there. fedrun builds the vocabulary itself (data.vocab_size), "
                "LEAF's reddit_vocab.pck is not needed.")
    return (f"LEAF {task.name} was not found: expected LEAF's JSON files in "
            f"{{root}}/leaf/{task.name}/data/train/*.json and {{root}}/leaf/{task.name}/data/test/*.json {task.raw}. "
            f"Make them with LEAF (https://github.com/TalwalkarLab/leaf): `cd data/{task.name} && ./preprocess.sh "
            f"...` (see its README), then copy its data/{task.name}/data/train and test folders there.")


SPECS = {
    name: DatasetSpec(name=f"leaf_{name}", description=t.description, meta=_meta(name), load=loader(name),
                      is_present=is_present_for(name), how_to_get=_how_to_get(t), has_users=True,
                      sequence_targets=name == "reddit")
    for name, t in TASKS.items()
}
