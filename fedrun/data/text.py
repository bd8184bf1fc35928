"""Word-level tokenising, vocabularies and fixed-length token sequences, in fedrun (no torchtext).

Ids: 0 = padding, 1 = out-of-vocabulary, then the most frequent training words (ties broken alphabetically), so a
vocabulary of size V holds V - 2 words. Sequences are padded and truncated at the front (Keras' ``pad_sequences``
default): a recurrent model that reads the final hidden state sees the end of every text.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import Counter
from collections.abc import Iterable
from pathlib import Path

import numpy as np

PAD, OOV = 0, 1
_MARKUP = re.compile(r"<[^>]+>")
_WORD = re.compile(r"[a-z0-9]+(?:'[a-z]+)?")


def words(text: str) -> list[str]:
    """Lower-cased words of ``text`` with HTML tags (IMDB's ``<br />``) removed; apostrophes stay inside words."""
    return _WORD.findall(_MARKUP.sub(" ", text.lower()))


def build_vocabulary(texts: Iterable[list[str]], size: int) -> dict[str, int]:
    """word -> id for the ``size - 2`` most frequent words (ids 2..size-1)."""
    counts = Counter(w for t in texts for w in t)
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[: max(0, size - 2)]
    return {w: i + 2 for i, (w, _) in enumerate(ranked)}


def encode(texts: Iterable[list[str]], vocab: dict[str, int], length: int) -> np.ndarray:
    """(N, length) int64 ids, truncated and padded at the front."""
    texts = list(texts)
    out = np.full((len(texts), length), PAD, dtype=np.int64)
    for row, t in zip(out, texts):
        ids = [vocab.get(w, OOV) for w in t][-length:]
        if ids:
            row[length - len(ids):] = ids
    return out


def cache_path(directory: Path, name: str, settings: dict) -> Path:
    """A cache file named by a hash of everything that changes its contents, so new settings never read old
    features."""
    key = hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:16]
    return directory / f"{name}-{key}.npz"


def load_or_build(path: Path, build) -> dict[str, np.ndarray]:
    """Arrays from the cache file, or built by ``build()`` and written atomically."""
    if path.exists():
        with np.load(path, allow_pickle=False) as z:
            return {k: z[k] for k in z.files}
    arrays = build()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp.npz")
    np.savez(tmp, **arrays)
    tmp.replace(path)
    return arrays
