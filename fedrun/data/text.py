"""Word-level tokenising, vocabularies and fixed-length token sequences, in fedrun (no torchtext).

Ids: 0 = padding, 1 = out-of-vocabulary, then the most frequent training words (ties broken alphabetically), so a
vocabulary of size V holds V - 2 words. Sequences are padded and truncated at the front (Keras' ``pad_sequences``
default): a recurrent model that reads the final hidden state sees the end of every text.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable

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
