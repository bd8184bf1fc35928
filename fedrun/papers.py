"""The papers' artefacts as data: ``paper/<paper>.yaml`` names a paper (title, authors, venue) and each of its tables
and figures fedrun reproduces: the experiment presets whose ``hydra.sweeper.params`` are its grid, the value it
reports, how its rows and columns are laid out, and the paper's own numbers keyed by the grid's values (a CSV block).
``fedrun-table`` (fedrun/table.py) runs and summarises them.
"""

from __future__ import annotations

import io
import os
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import pandas as pd
import yaml

from .errors import ConfigError

PAPER_DIR = Path(__file__).resolve().parent.parent / "paper"  # $FEDRUN_PAPERS names another folder (tests)
PRESET = "preset"  # the pseudo grid key naming which of an artefact's presets a run belongs to


@dataclass(frozen=True)
class Value:
    """What a table reports, named: ``of`` is a summary.json key (``final_test_acc``) or a metrics.csv column at a
    round (``test_acc@10``); ``scale`` multiplies it for display (100: percent; 1/3600: hours)."""

    name: str
    of: str
    scale: float = 1.0


@dataclass(frozen=True)
class Artefact:
    """One table or figure of a paper: the presets whose grids it runs, the values it reports, its ``rows`` and
    ``columns`` (grid keys: override keys such as ``algo`` or ``algo.selector.alpha``, or ``preset``) and the paper's
    numbers, one row per grid point the paper reports, one column per value."""

    name: str
    paper: str
    source: str
    what: str
    presets: tuple[str, ...]
    values: tuple[Value, ...]
    rows: tuple[str, ...] = ()
    columns: tuple[str, ...] = ()
    tolerance: float | None = None
    digits: int = 2  # decimals shown (0 for counts such as rounds)
    figure: str = "curves"  # curves (mean test accuracy per grid point) or none
    x: str = "round"  # the curves' x axis: round, or a metrics.csv column (sim_time_s)
    curves: tuple[str, ...] = ("test_acc",)  # the metrics.csv columns drawn, one panel each
    runs_of: str = ""  # another artefact whose runs this one reads (a second table of the same sweeps)
    paper_numbers: pd.DataFrame = field(default_factory=pd.DataFrame, compare=False, repr=False)


@dataclass(frozen=True)
class Paper:
    key: str
    cite: str
    title: str
    authors: str
    venue: str
    artefacts: dict[str, Artefact]

    @property
    def reference(self) -> str:
        return f"{self.authors}, \"{self.title}\", {self.venue}" if self.authors else f"\"{self.title}\", {self.venue}"


def normalise(value) -> str:
    """A grid value as text that compares equal however it was written (``0.1`` in YAML, ``0.1`` in an override,
    ``1.0`` and ``1.0``): parsed as YAML, then printed."""
    if isinstance(value, str):
        value = yaml.safe_load(value) if value.strip() else value
    return str(value)


def _numbers(text: str | None, values: tuple[Value, ...], where: str) -> pd.DataFrame:
    names = [v.name for v in values]
    if not text:
        return pd.DataFrame(columns=names)
    frame = pd.read_csv(io.StringIO(text), dtype=str, keep_default_na=False, skipinitialspace=True)
    absent = [n for n in names if n not in frame]
    if absent:
        raise ConfigError([f"{where}: the paper's numbers need a column per value ({absent} missing); the other "
                           "columns are grid keys"])
    keys = [c for c in frame.columns if c not in names]
    frame[keys] = frame[keys].map(normalise)
    for n in names:
        frame[n] = pd.to_numeric(frame[n].replace({"": None, "-": None}), errors="coerce")
    return frame


def _values(a: dict) -> tuple[Value, ...]:
    if "values" in a:
        return tuple(Value(name, v["of"], _scale(v.get("scale", 1.0))) for name, v in a["values"].items())
    return (Value("value", a.get("value", "final_test_acc"), _scale(a.get("scale", 1.0))),)


def _scale(scale) -> float:
    """A scale as a number or a fraction written as text (``1/3600``)."""
    if isinstance(scale, str) and "/" in scale:
        num, den = scale.split("/")
        return float(num) / float(den)
    return float(scale)


def read_paper(path: Path) -> Paper:
    raw = yaml.safe_load(path.read_text()) or {}
    key = path.stem
    artefacts = {}
    for name, a in (raw.get("artefacts") or {}).items():
        where = f"{path.name}: {name}"
        unknown = sorted(set(a) - {"source", "what", "presets", "value", "scale", "values", "rows", "columns",
                                   "tolerance", "digits", "figure", "x", "curves", "paper",
                                   "runs_of"})
        if unknown:
            raise ConfigError([f"{where}: unknown keys {unknown}"])
        values = _values(a)
        artefacts[name] = Artefact(name=name, paper=key, source=a["source"], what=a.get("what", ""),
                                   presets=tuple(a["presets"]), values=values, rows=tuple(a.get("rows", ())),
                                   columns=tuple(a.get("columns", ())), tolerance=a.get("tolerance"),
                                   digits=int(a.get("digits", 2)),
                                   figure=a.get("figure", "curves"), x=a.get("x", "round"),
                                   curves=tuple(a.get("curves", ("test_acc",))),
                                   runs_of=a.get("runs_of", ""),
                                   paper_numbers=_numbers(a.get("paper"), values, where))
    return Paper(key=key, cite=raw["cite"], title=raw["title"], authors=raw.get("authors", ""),
                 venue=raw.get("venue", ""), artefacts=artefacts)


def papers() -> dict[str, Paper]:
    return _papers(os.environ.get("FEDRUN_PAPERS") or str(PAPER_DIR))


@lru_cache(maxsize=None)
def _papers(folder: str) -> dict[str, Paper]:
    return {p.stem: read_paper(p) for p in sorted(Path(folder).glob("*.yaml"))}


def artefacts() -> dict[str, tuple[Paper, Artefact]]:
    """Every artefact by name, with its paper; names are unique across papers."""
    out: dict[str, tuple[Paper, Artefact]] = {}
    for paper in papers().values():
        for name, a in paper.artefacts.items():
            if name in out:
                raise ConfigError([f"artefact {name} is in both {out[name][0].key} and {paper.key}"])
            out[name] = (paper, a)
    return out
