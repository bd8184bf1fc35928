"""A run's config typed once: :class:`RunSettings`, what the engine, the data and the executors are given instead of
the composed DictConfig.

:func:`typed` reads a composed config once into its sections' and groups' dataclasses and the algorithm's parsed
parts, each range rule running as it is read; :func:`fedrun.config.checks.validate` adds the checks across groups and
returns the settings. A config already typed in this process (the command line's check before Hydra makes the run's
folder, then the run itself) is not read again: its result is kept by the config's resolved values.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from dataclasses import dataclass
from typing import Optional

from omegaconf import OmegaConf

from fedrun.algorithms.schema import AlgoSettings, parse_algo
from fedrun.config.schema import (GROUPS, SECTIONS, AvailabilityConfig, CheckpointConfig, DataConfig, DevicesConfig,
                                  DiagnosticsConfig, EvalConfig, FLConfig, HardwareConfig, LoggerConfig, ModelConfig,
                                  ParticipationConfig, PartitionConfig, TimingConfig)


@dataclass(frozen=True)
class RunSettings:
    """Every setting of a run, typed: the run's own sections, each group's dataclass and the algorithm's parts."""

    seed: int
    fl: FLConfig
    eval: EvalConfig
    diagnostics: DiagnosticsConfig
    checkpoint: CheckpointConfig
    hardware: HardwareConfig
    participation: ParticipationConfig
    timing: TimingConfig
    devices: DevicesConfig
    availability: AvailabilityConfig
    logger: LoggerConfig
    partition: PartitionConfig
    model: ModelConfig
    data: DataConfig
    algo: AlgoSettings
    progress: bool
    resume: bool
    overwrite: bool
    reuse: Optional[str]


def resolved(cfg) -> dict:
    """The composed config's values, interpolations resolved (Hydra's own node left out)."""
    values = OmegaConf.to_container(cfg, resolve=True) if OmegaConf.is_config(cfg) else dict(cfg)
    values.pop("hydra", None)
    return values


def key_of(values: dict) -> str:
    """What identifies a config's values (for the results kept per process)."""
    return json.dumps(values, sort_keys=True, default=str)


class Kept(OrderedDict):
    """The last few results of a function of a config's values, by :func:`key_of` (a process types and checks a
    handful of configs; a test session, many)."""

    def __init__(self, size: int = 16):
        super().__init__()
        self.size = size

    def keep(self, key: str, value):
        self[key] = value
        self.move_to_end(key)
        while len(self) > self.size:
            self.popitem(last=False)
        return value


_TYPED = Kept()


def typed(cfg) -> tuple[RunSettings, list[str]]:
    """The run's settings and every value out of its range (the sections', the groups' and each algorithm part's
    rules, each run once per config in this process); a problem leaves its node's raw values in place."""
    values = resolved(cfg)
    key = key_of(values)
    if key in _TYPED:
        return _TYPED[key]
    problems, nodes = [], {}
    for name, cls in (SECTIONS | GROUPS).items():
        try:
            nodes[name] = cls(**values[name])
        except TypeError as e:  # an untyped config (built by hand) with a key the schema lacks
            problems.append(f"{name}: {e}. Fix: set only the keys fedrun/config/schema.py:{cls.__name__} has")
            continue
        problems += nodes[name].problems()
    algo, found = parse_algo(values["algo"])
    problems += found
    if len(nodes) < len(SECTIONS | GROUPS):
        return _TYPED.keep(key, (None, problems))
    settings = RunSettings(seed=values["seed"], algo=algo, progress=values["progress"], resume=values["resume"],
                           overwrite=values["overwrite"], reuse=values["reuse"], **nodes)
    return _TYPED.keep(key, (settings, problems))
