"""Folders that live at the repository's top, beside the package (``conf/``: Hydra's config root; ``paper/``: the
papers' artefacts and numbers), and inside the package in a wheel (setup.py copies them there)."""

from __future__ import annotations

from pathlib import Path


def folder(name: str) -> Path:
    """``fedrun/<name>/`` in an installed wheel, else the repository's ``<name>/`` (a checkout, an editable
    install)."""
    package = Path(__file__).resolve().parent
    inside = package / name
    return inside if inside.is_dir() else package.parent / name
