"""The typed config of a run's own sections (``fl``, ``eval``, ``diagnostics``, ``checkpoint`` and the top-level
switches): each key's type and allowed range, beside it.

``RunConfig`` is registered in Hydra's ConfigStore as ``fedrun_schema``, the schema ``conf/config.yaml`` extends:
Hydra refuses a key fedrun does not have and a value of the wrong type while composing (``fl.lr=fast``), and
:func:`section_problems` states every value out of range as one line naming the key, the value, the range and the
fix. The values themselves, and the comments that say what each does, are written once, in ``conf/config.yaml``.
The groups (data, partition, model, algo, ...) keep their own checks: the algorithm parts in
:mod:`fedrun.algorithms.schema`, the rest in :mod:`fedrun.config`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Iterator, List, Optional

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, OmegaConf

Rule = tuple[bool, str, str, str]  # (holds, key, what the key must be, a value that fixes it)


@dataclass
class Section:
    """A config section whose ``rules`` state each key's range."""

    prefix: ClassVar[str]

    def rules(self) -> Iterator[Rule]:
        yield from ()

    def problems(self) -> list[str]:
        return [f"{self.prefix}.{key}={getattr(self, key)!r}: {rule}. Fix: {self.prefix}.{key}={fix}"
                for ok, key, rule, fix in self.rules() if not ok]


@dataclass
class FLConfig(Section):
    """Rounds, clients and local training (FedAvg's T, N, C, E, B and eta)."""

    prefix = "fl"
    rounds: int = MISSING
    num_clients: int = MISSING
    clients_per_round: int = MISSING
    local_epochs: float = MISSING
    batch_size: int = MISSING
    lr: float = MISSING
    lr_milestones: List[int] = MISSING
    lr_gamma: float = MISSING
    momentum: float = MISSING
    weight_decay: float = MISSING
    reshuffle: bool = MISSING

    def rules(self) -> Iterator[Rule]:
        yield self.rounds >= 1, "rounds", "must be an integer >= 1", "10"
        yield self.num_clients >= 1, "num_clients", "must be an integer >= 1", "10"
        if self.num_clients >= 1:
            yield (1 <= self.clients_per_round <= self.num_clients, "clients_per_round",
                   f"must be an integer in [1, fl.num_clients={self.num_clients}]",
                   str(min(self.num_clients, self.clients_per_round) if self.clients_per_round > 0 else 1))
        yield (self.local_epochs > 0, "local_epochs", "must be > 0 (fractions allowed: tau_i = floor(E n_i / B))",
               "1")
        yield self.batch_size >= 1, "batch_size", "must be an integer >= 1", "32"
        yield self.lr > 0, "lr", "must be > 0", "0.01"
        yield all(m >= 1 for m in self.lr_milestones), "lr_milestones", "must be a list of rounds >= 1", "[50]"
        yield 0 < self.lr_gamma <= 1, "lr_gamma", "must be in (0, 1]", "0.5"
        yield 0 <= self.momentum < 1, "momentum", "must be in [0, 1)", "0.9 or 0"
        yield self.weight_decay >= 0, "weight_decay", "must be >= 0", "0"


@dataclass
class EvalConfig(Section):
    """When and how the model is scored."""

    prefix = "eval"
    every: int = MISSING
    every_s: Optional[float] = MISSING
    target_acc: Optional[float] = MISSING
    batch_size: int = MISSING
    test_subset: Optional[int] = MISSING
    holdout: float = MISSING
    personalized: bool = MISSING
    class_metrics: bool = MISSING

    def rules(self) -> Iterator[Rule]:
        yield self.every >= 1, "every", "must be an integer >= 1", "1"
        yield (self.target_acc is None or 0 < self.target_acc <= 1, "target_acc",
               "must be null or an accuracy in (0, 1]", "0.95")
        yield self.batch_size >= 1, "batch_size", "must be an integer >= 1", "2048"
        yield (self.test_subset is None or self.test_subset >= 1, "test_subset",
               "must be null (the whole test set) or an integer >= 1 (a seeded subset of that many test samples)",
               "2500")
        yield (0 <= self.holdout < 1, "holdout",
               "must be in [0, 1) (the fraction of each client's samples held out as its own test samples)",
               "0.2 or 0")


@dataclass
class DiagnosticsConfig(Section):
    """What a round logs beyond accuracy and loss."""

    prefix = "diagnostics"
    conflicts: bool = MISSING
    similarity_every: int = MISSING
    track_params: int = MISSING

    def rules(self) -> Iterator[Rule]:
        yield self.similarity_every >= 0, "similarity_every", "must be an integer >= 0", "10"
        yield self.track_params >= 0, "track_params", "must be an integer >= 0 (coordinates)", "2"


@dataclass
class CheckpointConfig(Section):
    prefix = "checkpoint"
    every: int = MISSING
    keep: int = MISSING

    def rules(self) -> Iterator[Rule]:
        yield self.every >= 0, "every", "must be an integer >= 0 (0: no periodic checkpoints)", "10"
        yield self.keep >= 1, "keep", "must be an integer >= 1", "2"


@dataclass
class RunConfig:
    """The root config: the run's own sections, typed, and the groups (each checked by its own code)."""

    seed: int = MISSING
    fl: FLConfig = field(default_factory=FLConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    diagnostics: DiagnosticsConfig = field(default_factory=DiagnosticsConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    progress: bool = MISSING
    resume: bool = MISSING
    overwrite: bool = MISSING
    data: Any = MISSING
    partition: Any = MISSING
    participation: Any = MISSING
    timing: Any = MISSING
    model: Any = MISSING
    algo: Any = MISSING
    hardware: Any = MISSING
    logger: Any = MISSING


SECTIONS: dict[str, type[Section]] = {"fl": FLConfig, "eval": EvalConfig, "diagnostics": DiagnosticsConfig,
                                      "checkpoint": CheckpointConfig}
ConfigStore.instance().store(name="fedrun_schema", node=RunConfig)


def section_problems(cfg) -> list[str]:
    """Every value of the run's own sections out of its range, one line each (their types Hydra has checked)."""
    problems = []
    for name, cls in SECTIONS.items():
        values = OmegaConf.to_container(cfg[name], resolve=True)
        problems += cls(**values).problems()
    return problems
