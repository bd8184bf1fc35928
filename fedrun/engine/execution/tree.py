"""Nested dicts of tensors (a client's state) stacked along a leading client axis, and taken apart again."""

from __future__ import annotations

from typing import Callable

import torch


def tree_map(fn: Callable, tree, *rest):
    if isinstance(tree, dict):
        return {k: tree_map(fn, v, *(r[k] for r in rest)) for k, v in tree.items()}
    return fn(tree, *rest)


def stack(trees: list):
    if isinstance(trees[0], dict):
        return {k: stack([t[k] for t in trees]) for k in trees[0]}
    return torch.stack(trees)


def repeat(tree, n: int):
    """``stack([tree] * n)``, the same values: each leaf copied into its n rows by one parallel copy (torch.stack
    copies its n inputs one by one on one thread)."""
    return tree_map(lambda t: torch.empty((n, *t.shape), dtype=t.dtype, device=t.device).copy_(t.expand(n, *t.shape)),
                    tree)


def unstack(tree, n: int) -> list:
    return [tree_map(lambda t: t[i], tree) for i in range(n)]


def leaves(tree) -> list[torch.Tensor]:
    if isinstance(tree, dict):
        return [leaf for v in tree.values() for leaf in leaves(v)]
    return [tree]


def copy_rows(target, source, start: int, stop: int) -> None:
    """target[start:stop] = source[start:stop], leaf by leaf, in place."""
    if stop > start:
        tree_map(lambda a, b: a[start:stop].copy_(b[start:stop]), target, source)
