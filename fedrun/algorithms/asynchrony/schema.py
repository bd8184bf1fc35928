"""The typed config of each option of algo/asynchrony: its settings, their defaults and ranges, registered as the
schema its YAML (conf/algo/asynchrony/) extends. No torch: checking a config needs none."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterator, Optional

from omegaconf import II

from fedrun.algorithms.schema import PartConfig, is_int, is_number, register
from fedrun.config.schema import DEFAULT, Rule

STALENESS = ("constant", "sqrt", "polynomial", "hinge")


@register
@dataclass
class NoAsynchronyConfig(PartConfig):
    """Synchronous rounds: the server waits for the round's cohort."""

    part, target, options = "asynchrony", "fedrun.algorithms.asynchrony.none.NoAsynchrony", ("none",)
    name: str = "none"


@register
@dataclass
class AsyncServerConfig(PartConfig):
    """FedBuff (Nguyen et al., AISTATS 2022) or FedAsync (Xie et al. 2019): fl.clients_per_round clients train at
    once (the concurrency M); each server step is one of fl.rounds."""

    part, target, options = "asynchrony", "fedrun.algorithms.asynchrony.server.AsyncServer", ("fedbuff", "fedasync")
    name: str = "fedbuff"
    buffer: Optional[int] = None  # FedBuff's K: updates per server step; null: the concurrency M
    mixing: float = 0.6  # FedAsync's alpha: w <- (1 - alpha_s) w + alpha_s w_i
    staleness: str = "sqrt"  # s(tau): constant 1 | sqrt 1/sqrt(1+tau) | polynomial (1+tau)^-a | hinge (Xie et al.)
    staleness_a: float = 0.5  # polynomial's exponent a; hinge's slope a
    staleness_b: int = 4  # hinge's b: no discount up to this staleness
    seed: int = II("seed")  # which idle clients start

    def arguments(self) -> dict[str, Any]:
        return super().arguments() | {"kind": self.name}

    def rules(self) -> Iterator[Rule]:
        yield self.buffer is None or is_int(self.buffer) and self.buffer >= 1, "buffer", \
            "must be null (the concurrency) or an integer >= 1", "null"
        yield is_number(self.mixing) and 0 < self.mixing <= 1, "mixing", "must be in (0, 1]", DEFAULT
        yield self.staleness in STALENESS, "staleness", f"must be one of {STALENESS}", DEFAULT
        yield is_number(self.staleness_a) and self.staleness_a >= 0, "staleness_a", "must be >= 0", DEFAULT
        yield is_int(self.staleness_b) and self.staleness_b >= 0, "staleness_b", "must be an integer >= 0", DEFAULT
        yield is_int(self.seed), "seed", "must be an integer", DEFAULT
