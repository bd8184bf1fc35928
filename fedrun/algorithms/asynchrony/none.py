"""The default: synchronous rounds."""

from __future__ import annotations

from fedrun.algorithms.base import StatefulPart


class NoAsynchrony(StatefulPart):
    """The server waits for each round's cohort (the composed round)."""

    name = "none"
