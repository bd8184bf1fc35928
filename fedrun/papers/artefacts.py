"""The papers' artefacts as data: ``paper/<paper>.yaml`` names a paper (title, authors, venue) and each of its tables
and figures fedrun reproduces: the experiment presets whose ``hydra.sweeper.params`` are its grid, the value it
reports, how its rows and columns are laid out, the claims it makes, and the paper's own numbers keyed by the grid's
values (a CSV block). Also a preset's grid as Hydra composes it. ``fedrun-table`` (fedrun/papers/table.py) runs the
artefacts; fedrun/papers/table_summary.py summarises their runs.
"""

from __future__ import annotations

import io
import os
import re
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import pandas as pd
import yaml

from fedrun.errors import ConfigError
from fedrun.papers import CONFIRMATORY_FROM
from fedrun.config.overrides import override_key
from fedrun.shipped import folder as shipped_folder

PAPER_DIR = shipped_folder("paper")  # $FEDRUN_PAPERS names another folder (tests)
PRESET = "preset"  # the pseudo grid key naming which of an artefact's presets a run belongs to


@dataclass(frozen=True)
class Value:
    """What a table reports, named: ``of`` is a summary.json key (``final_test_acc``) or a metrics.csv column reduced
    over its logged rounds: at a round (``test_acc@10``), ``@last``, ``@max``, ``@mean``, ``@mean_last_K``,
    ``@std_last_K`` (how much it swings at the end), or
    ``@target``, at the first round whose test accuracy reached the run's ``eval.target_acc`` (``sim_time_s@target``:
    the simulated time to the target); ``a|b`` takes b where a run has no a. ``scale`` multiplies it for display
    (100: percent; 1/3600: hours)."""

    name: str
    of: str
    scale: float = 1.0

    @property
    def reaching(self) -> bool:
        """Whether the value counts how long a run took to reach a level: a run without one never reached it."""
        return self.of == "rounds_to_target" or self.of.endswith("@target")


@dataclass(frozen=True)
class Claim:
    """A claim the paper makes of an artefact, as a comparison of grid points: on ``value``, every one of ``method``
    (values of the grid key ``key``) is ``better`` (higher or lower) than every one of ``versus`` by more than
    ``margin``, at each point of the artefact's other grid keys but those listed in ``across`` (``[preset]``: the
    sides are in different presets of one grid). fedrun/papers/claims.py checks it on the mean over seeds.

    A claim pre-registered with the paper's ``effect`` (its size, in the value's unit, in the better direction) is
    decided by :func:`fedrun.papers.claims.paired_verdict` instead: seed-paired differences, their Student-t 95%
    interval (Holm-corrected over the claim's points), at least ``seeds`` pairs, and a mean of at least ``share`` of
    the paper's effect.

    ``tuned`` names a grid key that each side is tuned over rather than compared at: at each point, each side's value
    of that key with the best mean over seeds is the one compared (the same grid, so the same tuning budget, for
    both sides; the optimism of picking the best is shared)."""

    says: str
    value: str
    key: str
    method: tuple[str, ...]
    versus: tuple[str, ...]
    better: str = "higher"
    margin: float = 0.0
    across: tuple[str, ...] = ()
    effect: float | None = None  # the paper's effect: set, the claim is pre-registered (the paired rule decides it)
    seeds: int = 5  # the paired rule: seeds it needs before it decides
    share: float = 0.5  # the paired rule: the share of the paper's effect the mean difference must reach
    # or the paper's effect differs by the point of the other grid keys (a dataset's preset; each cell of a table the
    # paper prints): (the point's grid values, as (key, value) pairs, the effect there)
    effects: tuple[tuple[tuple[tuple[str, str], ...], float], ...] = ()
    tuned: str | None = None  # a grid key each side takes its best value of (a server learning rate)
    # why the claim holds whatever the runs show (the method's own rule makes it so): checked, but no support
    by_construction: str | None = None

    @property
    def preregistered(self) -> bool:
        return self.effect is not None or bool(self.effects)

    def paper_effect(self, where: dict) -> float | None:
        """The paper's effect at a point of the other grid keys (None: the paper states none there)."""
        if not self.effects:
            return self.effect
        at = {k: normalise(v) for k, v in where.items()}
        return next((e for point, e in self.effects if all(at.get(k) == v for k, v in point)), None)


@dataclass(frozen=True)
class Artefact:
    """One table or figure of a paper: the presets whose grids it runs (or the function that measures it, where it is
    not a training run: a timing, a centralised optimum), the values it reports, its ``rows`` and ``columns`` (grid
    keys: override keys such as ``algo`` or ``algo.step_selector.alpha``, or ``preset``) and the paper's numbers, one
    row per grid point the paper reports, one column per value."""

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
    measure: str = ""  # "module:function" measuring the artefact in place of a sweep (fedrun/papers/measures)
    data: tuple[str, ...] = ()  # the datasets a measured artefact reads (for --list)
    claims: tuple[Claim, ...] = ()
    not_run: dict[str, str] = field(default_factory=dict, compare=False)  # preset -> why it has no runs here
    # points the claims leave unchecked though they have runs: (the point's grid values, why), e.g. a base that is
    # another base on this model and would be counted twice
    not_checked: tuple[tuple[tuple[tuple[str, str], ...], str], ...] = field(default=(), compare=False)
    paper_numbers: pd.DataFrame = field(default_factory=pd.DataFrame, compare=False, repr=False)
    # presets on a dataset the paper did not use, standing in for one it did (MNIST for CIFAR-10 where CIFAR-10
    # cannot be fetched): substitute preset -> the paper's preset. Their points are decided against the paper's effect
    # there and counted apart (docs/papers.md, Substitutes)
    substitutes: dict[str, str] = field(default_factory=dict, compare=False)


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
    """The paper's numbers: a column per value the paper prints (a value it does not print has none) and a column
    per grid key the rows are keyed by."""
    names = [v.name for v in values]
    if not text:
        return pd.DataFrame(columns=names)
    frame = pd.read_csv(io.StringIO(text), dtype=str, keep_default_na=False, skipinitialspace=True)
    if not any(n in frame for n in names):
        raise ConfigError([f"{where}: the paper's numbers have no column named after a value ({names}); the other "
                           "columns are grid keys"])
    frame = frame.assign(**{n: "" for n in names if n not in frame})
    keys = [c for c in frame.columns if c not in names]
    frame[keys] = frame[keys].map(normalise)
    for n in names:
        frame[n] = pd.to_numeric(frame[n].replace({"": None, "-": None}), errors="coerce")
    return frame


def _values(a: dict) -> tuple[Value, ...]:
    if "values" in a:
        return tuple(Value(name, v["of"], _scale(v.get("scale", 1.0))) for name, v in a["values"].items())
    return (Value("value", a.get("value", "final_test_acc"), _scale(a.get("scale", 1.0))),)


RESERVED = {"run_dir", "preset", "seed", "status", "error", "diverged_round", "rounds_completed", "rounds",
            "planned_rounds", "fixture", "summary", "runs", "seeds", "note", "overrides"}  # the summary's own columns
REDUCTIONS = ("last", "max", "mean", "target")  # and a round number, mean_last_K or std_last_K


def _reduction_problem(of: str) -> str | None:
    if "@" not in of:
        return None
    at = of.split("@", 1)[1]
    last = at.removeprefix("mean_last_").removeprefix("std_last_")
    if at in REDUCTIONS or at.isdigit() or (last != at and last.isdigit()):
        return None
    return (f"{of!r}: after '@' comes a round number, {', '.join(REDUCTIONS)}, mean_last_K or std_last_K "
            "(test_acc@mean_last_10)")


def _claims(raw: list | None, values: tuple[Value, ...], where: str, numbers: pd.DataFrame | None = None
            ) -> tuple[Claim, ...]:
    """The claims block: ``says``, ``value`` (one of the artefact's values), ``better`` (higher|lower), ``margin``
    (default 0), ``across`` (grid keys pooled) and two mappings of one grid key to a value or a list of values,
    ``method`` and ``versus``. A pre-registered claim (``effect``) against a list of rivals is one paired claim
    against each, its ``says`` naming the rival where it writes ``{versus}``: the rule is stated once."""
    out, names = [], {v.name for v in values}
    known = {"says", "value", "better", "margin", "across", "method", "versus", "effect", "seeds", "share", "tuned",
             "by_construction"}
    for i, c in enumerate(raw or []):
        at = f"{where}: claims[{i}]"
        problems = [f"{at}: unknown keys {sorted(set(c) - known)}"] if set(c) - known else []
        value = c.get("value", "value")
        if value not in names:
            problems.append(f"{at}: value {value!r} is not one of the artefact's values {sorted(names)}")
        if c.get("better", "higher") not in ("higher", "lower"):
            problems.append(f"{at}: better={c.get('better')!r}; use higher or lower")
        effect = c.get("effect")
        by = effect if isinstance(effect, dict) and len(effect) == 1 else None
        each = list(next(iter(by.values())).values()) if by and isinstance(next(iter(by.values())), dict) else \
            [effect] if "effect" in c and not isinstance(effect, dict) else [None]
        if "effect" in c and effect != "paper" and not all(isinstance(e, (int, float)) and e > 0 for e in each):
            problems.append(f"{at}: effect={effect!r}: the paper's effect, a number > 0 in the value's unit, one "
                            "grid key's values each with its effect ({preset: {dgt_fig5_mnist: 5, ...}}), or paper "
                            "(the difference of the paper's own numbers at each point)")
        if not (isinstance(c.get("seeds", 5), int) and c.get("seeds", 5) >= 2):
            problems.append(f"{at}: seeds={c.get('seeds')!r}: the seed pairs the rule needs, an integer >= 2")
        if not (isinstance(c.get("share", 0.5), (int, float)) and 0 <= c.get("share", 0.5) <= 1):
            problems.append(f"{at}: share={c.get('share')!r}: the share of the paper's effect, in [0, 1]")
        if "tuned" in c and not (isinstance(c["tuned"], str) and c["tuned"]):
            problems.append(f"{at}: tuned={c['tuned']!r}: the grid key each side is tuned over (algo.server_opt.lr)")
        sides = [c.get("method"), c.get("versus")]
        if not all(isinstance(s, dict) and len(s) == 1 for s in sides) or set(sides[0]) != set(sides[1]):
            problems.append(f"{at}: method and versus each name the same one grid key and its values "
                            "(method: {algo/harmonizer: dgt}, versus: {algo/harmonizer: none})")
        if problems:
            raise ConfigError(problems)
        (key, method), versus = next(iter(sides[0].items())), sides[1][next(iter(sides[0]))]
        listed = [tuple(normalise(v) for v in (x if isinstance(x, list) else [x])) for x in (method, versus)]
        says = c.get("says", "")
        if "effect" in c and len(listed[0]) != 1:
            raise ConfigError([f"{at}: a pre-registered claim (effect) pairs one method value with each versus value "
                               f"by seed; it lists {list(listed[0])} as the method"])
        if "effect" in c and len(listed[1]) > 1 and "{versus}" not in says:
            raise ConfigError([f"{at}: a pre-registered claim against {list(listed[1])} is one claim against each; "
                               "write {versus} in its says where each names its rival"])
        better = c.get("better", "higher")
        for rival in [(v,) for v in listed[1]] if "effect" in c else [listed[1]]:
            if effect == "paper":  # a tuned claim's effect is the paper's wherever its own value of the tuned key is
                printed = pd.DataFrame() if numbers is None else numbers.drop(columns=[c.get("tuned")], errors="ignore")
                effects = paper_effects(printed, key, listed[0][0], rival[0], value, better)
                if not effects:
                    raise ConfigError([f"{at}: effect=paper, but the paper's numbers have no {value!r} for both "
                                       f"{key}={listed[0][0]} and {key}={rival[0]} at any point"])
            else:
                effects = tuple((((next(iter(by)), normalise(v)),), float(e))
                                for v, e in next(iter(by.values())).items()) if by else ()
            out.append(Claim(says=says.replace("{versus}", " and ".join(rival)), value=value,
                             key=key, method=listed[0], versus=rival, better=better,
                             margin=float(c.get("margin", 0.0)), across=tuple(c.get("across", ())),
                             effect=float(effect) if "effect" in c and not by and effect != "paper" else None,
                             seeds=int(c.get("seeds", 5)), share=float(c.get("share", 0.5)), effects=effects,
                             tuned=c.get("tuned"), by_construction=c.get("by_construction")))
    return tuple(out)


def paper_effects(numbers: pd.DataFrame, key: str, method: str, versus: str, value: str, better: str
                  ) -> tuple[tuple[tuple[tuple[str, str], ...], float], ...]:
    """The paper's own effect at each point of its table: ``method``'s number minus ``versus``'s (in the ``better``
    direction), at every point of the other grid keys where the paper prints both."""
    if numbers.empty or key not in numbers or value not in numbers:
        return ()
    others = [c for c in numbers.columns if c != key and c not in numbers.select_dtypes("number").columns]
    out = []
    for point, rows in numbers.groupby(others, sort=False) if others else [((), numbers)]:
        point = point if isinstance(point, tuple) else (point,)
        sides = [rows.loc[rows[key] == side, value].dropna() for side in (method, versus)]
        if all(len(s) == 1 for s in sides):
            gain = float(sides[0].iloc[0] - sides[1].iloc[0]) * (1 if better == "higher" else -1)
            out.append((tuple(zip(others, point)), round(gain, 10)))
    return tuple(out)


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
                                   "runs_of", "claims", "measure", "data", "not_run", "not_checked",
                                   "substitutes"})
        if unknown:
            raise ConfigError([f"{where}: unknown keys {unknown}"])
        if bool(a.get("presets")) == bool(a.get("measure")):
            raise ConfigError([f"{where}: give either presets (a sweep) or measure (module:function), not both"])
        if a.get("measure") and not re.fullmatch(r"[\w.]+:\w+", a["measure"]):
            raise ConfigError([f"{where}: measure={a['measure']!r}; write it module:function "
                               "(fedrun.papers.measures.hog_ceiling:measure)"])
        not_run = {str(k): str(v) for k, v in (a.get("not_run") or {}).items()}
        if stray := sorted(set(not_run) - set(a.get("presets") or ())):
            raise ConfigError([f"{where}: not_run names {stray}, which are not its presets {a.get('presets')}"])
        substitutes = {str(k): str(v) for k, v in (a.get("substitutes") or {}).items()}
        if stray := sorted((set(substitutes) | set(substitutes.values())) - set(a.get("presets") or ())):
            raise ConfigError([f"{where}: substitutes names {stray}, which are not its presets; write "
                               "{substitute preset: the preset of the paper's dataset it stands in for}"])
        not_checked = []
        for i, entry in enumerate(a.get("not_checked") or ()):
            if not (isinstance(entry, dict) and set(entry) == {"at", "why"} and isinstance(entry["at"], dict)
                    and entry["at"] and isinstance(entry["why"], str)):
                raise ConfigError([f"{where}: not_checked[{i}]={entry!r}: write {{at: {{grid key: value, ...}}, why: "
                                   "text}} ({at: {algo: feddecorr}, why: identical to FedAvg on this model})"])
            not_checked.append((tuple((str(k), normalise(v)) for k, v in entry["at"].items()), entry["why"]))
        values = _values(a)
        numbers = _numbers(a.get("paper"), values, where)
        if taken := sorted({v.name for v in values} & RESERVED):
            raise ConfigError([f"{where}: a value may not be named {taken}: the summary has columns of that name "
                               f"({', '.join(sorted(RESERVED))}); name it otherwise ('rounds to target')"])
        if bad := [p for v in values for o in v.of.split("|") if (p := _reduction_problem(o))]:
            raise ConfigError([f"{where}: {p}" for p in bad])
        artefacts[name] = Artefact(name=name, paper=key, source=a["source"], what=a.get("what", ""),
                                   presets=tuple(a.get("presets") or ()), values=values, rows=tuple(a.get("rows", ())),
                                   columns=tuple(a.get("columns", ())), tolerance=a.get("tolerance"),
                                   digits=int(a.get("digits", 2)),
                                   figure=a.get("figure", "curves"), x=a.get("x", "round"),
                                   curves=tuple(a.get("curves", ("test_acc",))),
                                   runs_of=a.get("runs_of", ""), measure=a.get("measure", ""),
                                   data=tuple(a.get("data", ())),
                                   claims=_claims(a.get("claims"), values, where, numbers),
                                   not_run=not_run, not_checked=tuple(not_checked), paper_numbers=numbers,
                                   substitutes=substitutes)
    return Paper(key=key, cite=raw["cite"], title=raw["title"], authors=raw.get("authors", ""),
                 venue=raw.get("venue", ""), artefacts=artefacts)


CONFIRMING = "FEDRUN_CONFIRMATORY"  # "1" in the sweeps `fedrun-table --confirm` starts: the block is theirs
NOT_A_PAPERS = {"smoke"}  # the experiment presets that pin no paper's setting


def confirmatory_seeds(artefact: Artefact) -> list[int]:
    """The seeds an artefact's claims are confirmed on: the first ``seeds`` (the most any of its claims needs; 5 for
    a claim on the means) of the confirmatory block, fixed by their registration and unseen by exploration."""
    needed = max((c.seeds for c in artefact.claims), default=0)
    return list(range(CONFIRMATORY_FROM, CONFIRMATORY_FROM + needed))


def tuning_seeds(artefact: Artefact) -> list[int]:
    """The seeds a tuned pre-registered claim picks its values on before they are tested on the confirmatory ones:
    as many, from 0 (none for an artefact without a tuned claim)."""
    if not any(c.tuned and c.preregistered for c in artefact.claims):
        return []
    return list(range(len(confirmatory_seeds(artefact))))


def seeds_given(overrides: list[str]) -> list[int]:
    """Every seed a command's ``seed=`` overrides name (a single value, a sweep ``0,1``, ``range(3)``)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    given = [o for o in overrides if override_key(o) == "seed"]
    seeds = []
    for override in OverridesParser.create().parse_overrides(given) if given else []:
        values = override.sweep_string_iterator() if override.is_sweep_override() else [override.value()]
        seeds += [int(float(v)) for v in values if str(v).lstrip("-").replace(".", "", 1).isdigit()]
    return seeds


def in_block(seeds) -> list[int]:
    """The seeds of ``seeds`` in the confirmatory block, sorted, each once."""
    return sorted({s for s in seeds if s >= CONFIRMATORY_FROM})


def confirmatory_block_refused(overrides: list[str]) -> str | None:
    """A command that runs a paper's setting (an experiment preset fedrun ships) on a seed of the confirmatory block
    outside ``fedrun-table --confirm``: why it is refused and the fix; None for any other command."""
    blocked = [] if os.environ.get(CONFIRMING) == "1" else in_block(seeds_given(overrides))
    if not blocked:
        return None
    from fedrun.config.compose import CONF_DIR

    chosen = {o.split("=", 1)[1] for o in overrides if override_key(o) == "experiment"}
    theirs = {p.stem for p in (Path(CONF_DIR) / "experiment").glob("*.yaml")} - NOT_A_PAPERS  # each pins a paper's
    if not chosen & theirs:
        return None
    return (f"seed={','.join(map(str, blocked))}: seeds {CONFIRMATORY_FROM} and up are the confirmatory block that "
            f"the papers' claims reserve, and experiment={sorted(chosen & theirs)[0]} is a paper's preset: no "
            f"exploration may see them. Fix: explore with seeds below {CONFIRMATORY_FROM}, or run an artefact's "
            f"registered seeds with `fedrun-table <artefact> --confirm`")


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


def grid(preset: str, overrides: list[str] = ()) -> dict[str, list[str]]:
    """The preset's grid (its ``hydra.sweeper.params``) with the sweeps among ``overrides`` (``seed=0,1,2``): each
    key's values, in order."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    params = composed(preset).hydra.sweeper.params or {}
    axes = {str(k): [v.strip() for v in str(vs).split(",")] for k, vs in params.items()}
    for o in OverridesParser.create().parse_overrides([o for o in overrides if "=" in o]):
        if o.is_sweep_override():
            axes[o.key_or_group] = [str(v) for v in o.sweep_string_iterator()]
        elif o.key_or_group in axes:  # one value of a grid key: the command line's, as Hydra takes it
            axes[o.key_or_group] = [o.input_line.split("=", 1)[1]]
    return axes


@lru_cache(maxsize=None)
def outline(preset: str) -> tuple[dict[str, list[str]], str]:
    """The preset's grid (as :func:`grid` without overrides) and dataset, read from its YAML and the presets it builds
    on, without composing it (which takes most of a second a preset): what ``fedrun-table --list`` shows. A preset's
    own settings come after those of the presets it lists, and Hydra merges the grids key by key; the tests hold this
    to the composed config for every preset."""
    from fedrun.config.compose import CONF_DIR

    root = Path(CONF_DIR)
    node = yaml.safe_load((root / "experiment" / f"{preset}.yaml").read_text()) or {}
    axes: dict[str, list[str]] = {}
    data = None
    for entry in node.get("defaults") or []:
        if isinstance(entry, str) and entry != "_self_":
            parent_axes, parent_data = outline(entry.removeprefix("/experiment/"))
            axes |= parent_axes
            data = parent_data
        elif isinstance(entry, dict) and "override /data" in entry:
            data = entry["override /data"]
    params = ((node.get("hydra") or {}).get("sweeper") or {}).get("params") or {}
    axes |= {str(k): [v.strip() for v in str(vs).split(",")] for k, vs in params.items()}
    if data is None:
        top = yaml.safe_load((root / "config.yaml").read_text())
        data = next(d["data"] for d in top["defaults"] if isinstance(d, dict) and "data" in d)
    return axes, str(data)


@lru_cache(maxsize=None)
def composed(preset: str):
    """The preset as Hydra composes it (its sweeper's params included), once per process."""
    from fedrun.config.compose import compose_config

    return compose_config([f"experiment={preset}"], hydra=True)


def preset_config(preset: str, overrides: list[str] = ()):
    """The config a job of the preset runs with ``overrides`` (their sweeps and Hydra's own keys aside)."""
    from fedrun.config.compose import compose_config

    given = [o for o in overrides if not is_sweep(o) and not override_key(o).startswith("hydra")]
    return compose_config([f"experiment={preset}", *given]) if given else composed(preset)


def is_sweep(override: str) -> bool:
    from hydra.core.override_parser.overrides_parser import OverridesParser

    key = override.split("=", 1)[0]
    return not key.startswith("hydra") and OverridesParser.create().parse_override(override).is_sweep_override()

