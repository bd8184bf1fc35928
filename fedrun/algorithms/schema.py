"""The algorithm parts' configs, registered and parsed: :func:`parse`, :func:`parse_algo` and :func:`make` over
every option of fedrun's own parts (:data:`PART_MODULES`) and any part registered beside them. Each part's config
is a dataclass beside its class, in the part's own module (``FedGHConfig`` beside ``FedGH`` in
``fedrun/algorithms/harmonizer/fedgh.py``), deriving from :class:`~fedrun.algorithms.part_config.PartConfig`: its
settings, their defaults (the one place they are written), their allowed ranges, and the class it builds. Those
modules import torch on first use only (:mod:`fedrun.process.lazy`), so checking a config still loads no torch.

Each config is registered in Hydra's ConfigStore under its class's name (``algo/harmonizer/FedGHConfig``), the
schema its YAML option (``conf/algo/<part>/<option>.yaml``) names in its defaults and extends: Hydra refuses a key
the part does not have and a value of the wrong type while composing, and :func:`parse` refuses a value out of
range, each as one line naming the key, the value, the allowed range and the fix, before any data is loaded.
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib
from dataclasses import dataclass
from types import SimpleNamespace

from omegaconf import DictConfig, OmegaConf

from fedrun.algorithms.part_config import SCHEMAS, PartConfig, is_int, is_number, is_unit, register  # noqa: F401
from fedrun.errors import ConfigError


# the modules of fedrun's own parts, each registering its options' configs (@register) as it is imported: in the order
# a round meets the plug points, and within one in the order its options are offered
PART_MODULES = ("local.sgd", "local.dpsgd", "local.perfedavg", "local.variance_reduced", "local.fsvrg",
                "step_selector.all_steps", "step_selector.herd", "step_selector.grab", "step_selector.random_subset",
                "harmonizer.none", "harmonizer.fedgh", "harmonizer.dgt",
                "aggregator.weighted",
                "privacy.none", "privacy.dp_fedavg",
                "server_opt.optimizers",
                "schedule.fixed", "schedule.gift", "schedule.adacomm", "schedule.afl",
                "bank.bank",
                "asynchrony.none", "asynchrony.server")
for _module in PART_MODULES:
    importlib.import_module(f"fedrun.algorithms.{_module}")


def parse(part: str, node) -> PartConfig:
    """The typed config of one part from its composed node (``cfg.algo.<part>``); ConfigError naming the bad key(s)."""
    values = OmegaConf.to_container(node, resolve=True) if isinstance(node, DictConfig) else dict(node)
    name = values.get("name")
    options = SCHEMAS[part]
    if name not in options:
        raise ConfigError([f"algo/{part}={name!r} is unknown; choose one of {sorted(options)}. "
                           f"Fix: algo/{part}={next(iter(options))}"])
    cls = options[name]
    fields = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(values) - fields)
    if unknown:
        raise ConfigError([f"algo.{part}.{key}: algo/{part}={name} has no such setting"
                           + (f"; did you mean algo.{part}.{match[0]}?" if (match := difflib.get_close_matches(
                               key, sorted(fields), n=1, cutoff=0.5)) else f"; its settings are {sorted(fields)}")
                           for key in unknown])
    return cls(**values)


@dataclass(frozen=True)
class AlgoSettings:
    """An ``algo`` node typed once: the preset's name, whether it pools all data in one client (centralized), and
    each plug point's parsed config, in the order a round meets them (``parts``)."""

    name: str
    pooled: bool
    parts: dict[str, PartConfig]

    def __getattr__(self, part: str) -> PartConfig:
        try:
            return self.__dict__["parts"][part]
        except KeyError:
            raise AttributeError(part) from None


def parse_algo(node) -> tuple[AlgoSettings, list[str]]:
    """Every part of a composed ``algo`` node parsed (each part's range rules run here, once): the typed settings
    and the problems found. A part that cannot be parsed stays in ``parts`` as a namespace of its raw values, so that
    checks across groups can still read it while its problems are said."""
    values = OmegaConf.to_container(node, resolve=True) if isinstance(node, DictConfig) else dict(node)
    parts, problems = {}, []
    for part in SCHEMAS:
        raw = values.get(part) or {}
        try:
            parts[part] = parse(part, raw)
        except ConfigError as e:
            problems += e.problems
            parts[part] = SimpleNamespace(**{"name": None, **raw})
    return AlgoSettings(str(values.get("name")), bool(values.get("pooled", False)), parts), problems


def make(part: str, name: str, **settings):
    """The part ``name`` of ``part`` with its schema's defaults and ``settings``, checked like a composed config's
    (for code and tests that build a part without one; an interpolated default, e.g. a step selector's local_epochs,
    must be given)."""
    return parse(part, {"name": name, **settings}).build()


def schema_keys() -> frozenset[str]:
    """Every dotted key that some part's schema defines (``algo.local.mu``, ...)."""
    return frozenset(f"algo.{part}.{f.name}" for part, options in SCHEMAS.items() for cls in options.values()
                     for f in dataclasses.fields(cls))
