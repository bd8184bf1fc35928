"""What every algorithm part's typed config shares: :class:`PartConfig`, :func:`register`, :func:`parse` and
:func:`make`. Each part's options have theirs beside their classes (``fedrun/algorithms/<part>/schema.py``): its
settings, their defaults (the one place they are written), their allowed ranges, and the class it builds.

Each config is registered in Hydra's ConfigStore as ``algo/<part>/<option>_schema``, the schema its YAML option
(``conf/algo/<part>/<option>.yaml``) extends: Hydra refuses a key the part does not have and a value of the wrong
type while composing, and :func:`parse` refuses a value out of range, each as one line naming the key, the value,
the allowed range and the fix, before any data is loaded.
"""

from __future__ import annotations

import dataclasses
import difflib
import numbers
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any, ClassVar

from hydra.core.config_store import ConfigStore
from hydra.utils import get_class
from omegaconf import DictConfig, OmegaConf

from fedrun.errors import ConfigError
from fedrun.config.schema import Section


def is_int(v) -> bool:
    return isinstance(v, numbers.Integral) and not isinstance(v, bool)


def is_number(v) -> bool:
    return isinstance(v, numbers.Real) and not isinstance(v, bool)


def is_unit(v) -> bool:
    """A decay or momentum coefficient: a number in [0, 1)."""
    return is_number(v) and 0 <= v < 1


@dataclass
class PartConfig(Section):
    """A part's settings. ``rules`` states the range of each (refused on construction); ``build`` makes the part."""

    part: ClassVar[str]  # the plug point: local, step_selector, ..., bank (SCHEMAS' keys)
    target: ClassVar[str]  # the class this config builds, as a dotted path
    options: ClassVar[tuple[str, ...]]  # the YAML options (conf/algo/<part>/<option>.yaml) this config is the schema of
    name: str

    @property
    def prefix(self) -> str:
        return f"algo.{self.part}"

    def default(self, key: str):
        """A part's defaults are its dataclass's: written once, beside its rules."""
        field_ = next(f for f in dataclasses.fields(self) if f.name == key)
        return field_.default if field_.default is not dataclasses.MISSING else field_.default_factory()

    def __post_init__(self):
        if self.name not in self.options:
            raise ConfigError([f"algo.{self.part}.name={self.name!r}: must be one of {list(self.options)}. "
                               f"Fix: algo/{self.part}={self.options[0]}"])
        found = self.problems()
        if found:
            raise ConfigError(found)

    def arguments(self) -> dict[str, Any]:
        """The part's constructor arguments: every setting but its name (and the batch order, read by fl.reshuffle)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name not in ("name", "reshuffle")}

    def build(self):
        return get_class(self.target)(**self.arguments())


SCHEMAS: dict[str, dict[str, type[PartConfig]]] = {}


def register(cls: type[PartConfig]) -> type[PartConfig]:
    """Make ``cls``'s options choosable as ``algo/<part>=<option>``: its schema goes to ConfigStore (as
    ``algo/<part>/<option>_schema``, for the option's YAML to extend) and to :func:`parse`. A new part is a module
    with its class and config, registered when imported, plus one YAML (docs/adding-a-part.md)."""
    for option in cls.options:
        SCHEMAS.setdefault(cls.part, {})[option] = cls
        ConfigStore.instance().store(group=f"algo/{cls.part}", name=f"{option}_schema", node=cls)
    return cls


# each part's schema module registers its options (@register) when imported; in the order a round meets the parts
from fedrun.algorithms.local import schema as _local  # noqa: E402,F401
from fedrun.algorithms.step_selector import schema as _selector  # noqa: E402,F401
from fedrun.algorithms.harmonizer import schema as _harmonizer  # noqa: E402,F401
from fedrun.algorithms.aggregator import schema as _aggregator  # noqa: E402,F401
from fedrun.algorithms.privacy import schema as _privacy  # noqa: E402,F401
from fedrun.algorithms.server_opt import schema as _server_opt  # noqa: E402,F401
from fedrun.algorithms.schedule import schema as _schedule  # noqa: E402,F401
from fedrun.algorithms.bank import schema as _bank  # noqa: E402,F401
from fedrun.algorithms.asynchrony import schema as _asynchrony  # noqa: E402,F401


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
