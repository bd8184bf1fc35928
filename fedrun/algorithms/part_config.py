"""What an algorithm part's config derives from: :class:`PartConfig` (its settings, their ranges, the class it
builds) and :func:`register`, which makes its options choosable; the value tests its rules use. The configs live
beside their classes in the parts' modules; :mod:`fedrun.algorithms.schema` imports fedrun's own parts and parses
a composed ``algo`` node with them."""

from __future__ import annotations

import dataclasses
import numbers
from dataclasses import dataclass
from typing import Any, ClassVar

from hydra.core.config_store import ConfigStore
from hydra.utils import get_class

from fedrun.config.schema import Section
from fedrun.errors import ConfigError


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
    """Make ``cls``'s options choosable as ``algo/<part>=<option>``: its schema goes to ConfigStore under its class's
    name, for the option's YAML to name and extend, and to :func:`parse`. A new part is a module with its class and
    config, registered when imported, plus one YAML (docs/adding-a-part.md)."""
    ConfigStore.instance().store(group=f"algo/{cls.part}", name=cls.__name__, node=cls)  # what the YAML names
    for option in cls.options:
        SCHEMAS.setdefault(cls.part, {})[option] = cls
    return cls
