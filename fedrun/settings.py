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
    """A config section whose ``rules`` state each key's range; ``options``: the YAML options of a group it is the
    schema of."""

    prefix: ClassVar[str]
    options: ClassVar[tuple[str, ...]] = ()

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


# ---- the groups whose options share one shape: each option's YAML extends its schema (``<group>/<option>_schema``)


@dataclass
class HardwareConfig(Section):
    """Where and how a round computes; execution only: nothing here changes what is computed (but ``dtype``)."""

    prefix = "hardware"
    device: str = MISSING
    executor: str = MISSING
    chunk_size: Optional[int] = MISSING
    memory_fraction: float = MISSING
    compile: bool = MISSING
    dtype: str = MISSING
    num_threads: Optional[int] = MISSING
    step_store: str = MISSING
    gram_block: int = MISSING

    def rules(self) -> Iterator[Rule]:
        from .engine.executor import EXECUTORS

        yield self.device in ("auto", "cpu", "cuda"), "device", "must be auto, cpu or cuda", "auto"
        executors = ("auto", *EXECUTORS)
        yield self.executor in executors, "executor", f"must be one of {executors}", "auto"
        yield (self.chunk_size is None or self.chunk_size >= 1, "chunk_size",
               "must be null (sized from free memory) or an integer >= 1", "null")
        yield 0 < self.memory_fraction <= 1, "memory_fraction", "must be in (0, 1]", "0.5"
        yield self.dtype in ("float32", "float64"), "dtype", "must be float32 or float64", "float32"
        yield (self.num_threads is None or self.num_threads >= 1, "num_threads", "must be null or an integer >= 1",
               "2")
        yield self.step_store in ("auto", "device", "host"), "step_store", "must be auto, device or host", "auto"
        yield self.gram_block >= 1, "gram_block", "must be an integer >= 1", "65536"


@dataclass
class UniformParticipation(Section):
    prefix, options = "participation", ("uniform",)
    name: str = MISSING


@dataclass
class EarliestParticipation(Section):
    """GIFT Sec. 6.1: the server keeps the earliest ``fraction`` of all clients' reports."""

    prefix, options = "participation", ("earliest",)
    name: str = MISSING
    fraction: float = MISSING
    delay: str = MISSING
    delay_scale: float = MISSING

    def rules(self) -> Iterator[Rule]:
        from .engine.cohort import DELAYS

        yield 0 < self.fraction <= 1, "fraction", "must be in (0, 1]", "0.4"
        yield self.delay in DELAYS, "delay", f"must be one of {DELAYS}", "exponential"
        yield self.delay_scale > 0, "delay_scale", "must be > 0", "1.0"


@dataclass
class NoTiming(Section):
    prefix, options = "timing", ("none",)
    name: str = MISSING


@dataclass
class SimulatedTiming(Section):
    """GIFT Sec. 6.1's time model."""

    prefix, options = "timing", ("simulated",)
    name: str = MISSING
    step_time_s: Optional[float] = MISSING
    bandwidth_mbps: float = MISSING
    server_bandwidth_mbps: float = MISSING
    budget_s: Optional[float] = MISSING

    def rules(self) -> Iterator[Rule]:
        yield self.step_time_s is None or self.step_time_s > 0, "step_time_s", "must be null (measured) or > 0", "null"
        yield self.bandwidth_mbps > 0, "bandwidth_mbps", "must be > 0", "25"
        yield self.server_bandwidth_mbps > 0, "server_bandwidth_mbps", "must be > 0", "10000"
        yield self.budget_s is None or self.budget_s > 0, "budget_s", "must be null or > 0", "null"


@dataclass
class FileLogger(Section):
    prefix, options = "logger", ("csv", "none")
    name: str = MISSING


@dataclass
class WandbSettings(Section):
    prefix, options = "logger", ("wandb",)
    name: str = MISSING
    project: str = MISSING
    entity: Optional[str] = MISSING
    group: Optional[str] = MISSING
    tags: List[str] = MISSING
    mode: Optional[str] = MISSING

    def rules(self) -> Iterator[Rule]:
        yield (self.mode in (None, "online", "offline", "disabled"), "mode",
               "must be null ($WANDB_MODE or W&B's default), online, offline or disabled", "offline")


GROUPS: dict[str, dict[str | None, type[Section]]] = {"hardware": {None: HardwareConfig}}
for _cls in (UniformParticipation, EarliestParticipation, NoTiming, SimulatedTiming, FileLogger, WandbSettings):
    for _option in _cls.options:
        GROUPS.setdefault(_cls.prefix, {})[_option] = _cls
for _group, _options in GROUPS.items():
    for _option, _cls in _options.items():
        ConfigStore.instance().store(group=_group, name=f"{_option or _group}_schema", node=_cls)

SECTIONS: dict[str, type[Section]] = {"fl": FLConfig, "eval": EvalConfig, "diagnostics": DiagnosticsConfig,
                                      "checkpoint": CheckpointConfig}
ConfigStore.instance().store(name="fedrun_schema", node=RunConfig)


def section_problems(cfg) -> list[str]:
    """Every value of the run's own sections and of the typed groups out of its range, one line each (their types
    Hydra has checked while composing)."""
    problems = []
    for name, cls in SECTIONS.items():
        problems += cls(**OmegaConf.to_container(cfg[name], resolve=True)).problems()
    for group, options in GROUPS.items():
        values = OmegaConf.to_container(cfg[group], resolve=True)
        cls = options.get(values.get("name"))
        if cls is None:
            problems.append(f"{group}={values.get('name')!r}: unknown option. Fix: {group}={next(iter(options))}")
        else:
            problems += cls(**values).problems()
    return problems
