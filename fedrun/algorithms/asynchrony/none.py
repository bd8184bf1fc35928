"""The default: synchronous rounds."""

from __future__ import annotations

from dataclasses import dataclass

from fedrun.algorithms.base import StatefulPart
from fedrun.algorithms.part_config import PartConfig, register


class NoAsynchrony(StatefulPart):
    """The server waits for each round's cohort (the composed round)."""

    name = "none"


@register
@dataclass
class NoAsynchronyConfig(PartConfig):
    """Synchronous rounds: the server waits for the round's cohort."""

    part, target, options = "asynchrony", "fedrun.algorithms.asynchrony.none.NoAsynchrony", ("none",)
    name: str = "none"
