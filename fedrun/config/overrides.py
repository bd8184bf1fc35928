"""Command-line overrides checked before Hydra composes them, so that a wrong option or key gets fedrun's form of
error (one line per problem, the valid choices, the nearest match, exit status 2) instead of Hydra's trace.

Three kinds of mistakes are caught: an option a config group does not have (``data=svhn``; a method that is a part
of an algorithm, ``algo=afl``, is told where it plugs in), a key the composed config does not have (``fl.round=3``,
a part's setting while another part is chosen) or a value of the wrong type, and a key added with ``+`` that nothing
in fedrun reads. The keys' and values' mistakes are the errors Hydra's own composition raises, translated: fedrun
does not look for them itself, it says them.
"""

from __future__ import annotations

import dataclasses
import math
import difflib
from functools import cache
from pathlib import Path

from omegaconf import OmegaConf

from fedrun.algorithms.schema import SCHEMAS, schema_keys
from fedrun.config.renames import REPLACED
from fedrun.config.schema import conf_node

# What each algorithm part is called when its option is asked for in the wrong group
PART_WORDS = {"local": "local rule", "step_selector": "step selector", "harmonizer": "harmonizer",
              "aggregator": "aggregator", "privacy": "privacy mechanism",
              "server_opt": "server optimiser", "schedule": "schedule",
              "bank": "model bank", "asynchrony": "asynchronous server"}


@cache
def group_options(conf_dir: str, extra: tuple[str, ...] = ()) -> dict[str, list[str]]:
    """Every config group under ``conf_dir`` and the ``extra`` folders of ``hydra.searchpath`` (``data``,
    ``algo/harmonizer``, ...) and its options."""
    out: dict[str, set[str]] = {}
    for root in map(Path, (conf_dir, *extra)):
        for folder in sorted(p for p in root.rglob("*") if p.is_dir()):
            group = folder.relative_to(root).as_posix()
            if group.startswith("hydra"):
                continue
            options = {p.stem for p in folder.glob("*.yaml")}
            if options:
                out.setdefault(group, set()).update(options)
    return {group: sorted(options) for group, options in sorted(out.items())}


def searchpath(parsed: list) -> tuple[list[str], tuple[str, ...]]:
    """The command line's ``hydra.searchpath=[file://DIR,...]`` override (to compose with it) and its folders: where
    options of one's own (a new algorithm part's YAML) sit beside fedrun's ``conf/``."""
    lines, dirs = [], []
    for o in parsed:
        if o.key_or_group == "hydra.searchpath":
            lines.append(o.input_line)
            value = o.value()
            dirs += [v.removeprefix("file://") for v in (value if isinstance(value, list) else [value])
                     if str(v).startswith("file://")]
    return lines, tuple(dirs)


@cache
def known_keys(conf_dir: str) -> frozenset[str]:
    """Every dotted key that some config file of fedrun sets (a key read with a default is set in at least one)."""
    root = Path(conf_dir)
    keys = set()
    for path in root.rglob("*.yaml"):
        group = path.parent.relative_to(root).as_posix()
        if group.startswith("hydra") or group == "experiment":
            continue
        node = {k: v for k, v in conf_node(path).items() if k not in ("defaults", "hydra")}
        prefix = "" if group == "." else group.replace("/", ".") + "."
        keys |= {prefix + k for k in _flat(node)}
    return frozenset(keys | schema_keys())


def _flat(node: dict, prefix: str = "") -> list[str]:
    out = []
    for k, v in node.items():
        out.append(prefix + str(k))
        if isinstance(v, dict):
            out += _flat(v, f"{prefix}{k}.")
    return out


def override_key(override: str) -> str:
    """The key an override sets (``+a.b=1``, ``~a.b``: ``a.b``)."""
    return override.split("=", 1)[0].lstrip("+~")


def nearest(word: str, choices) -> str:
    match = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.5)
    return f" Did you mean {match[0]}?" if match else ""


def check_overrides(args: list[str], conf_dir: str) -> list[str]:
    """The problems of the command line's overrides, each one line naming the override, what is valid and the
    nearest match; empty when Hydra can compose them. Groups' options are checked against conf/'s files (no
    composition for a command line of options alone); values are composed once, and each error Hydra raises is said
    in fedrun's words and its override left out of the next composition, so that every problem is said at once, with
    the ranges a run would refuse the well-typed values for."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    words = [a for a in args if "=" in a and not a.startswith("-")]
    try:
        parsed = OverridesParser.create().parse_overrides(words)
    except HydraException as e:
        return [f"cannot read the overrides: {str(e).splitlines()[0]}"]
    search, extra = searchpath(parsed)
    groups, problems, choices, values = group_options(conf_dir, extra), [], list(search), []
    for o in parsed:
        key = o.key_or_group
        if key.startswith("hydra") or o.is_delete():
            continue
        if key in groups or (key.startswith("+") and key[1:] in groups):
            asked = list(o.sweep_string_iterator()) if o.is_sweep_override() else [str(o.value())]
            unknown = [option for option in asked if option not in groups[key]]
            problems += [unknown_option(key, option, groups) for option in unknown]
            if not unknown:  # an unknown option is left out: the rest is checked with the group's default
                choices.append(f"{key}={asked[0]}")
        else:
            values.append(o)
    if not values:  # group options alone: checked above (a preset's own problem: Hydra says it best)
        return problems
    everywhere = known_keys(conf_dir)
    unread = [o for o in values if o.is_add() and o.key_or_group not in everywhere]  # Hydra adds any key
    problems += [f"+{o.key_or_group}: nothing in fedrun reads this key, so the run would ignore it. Fix: drop it"
                 f"{nearest(o.key_or_group, everywhere).replace(' Did you mean', '; did you mean')}" for o in unread]
    refused, remaining = [], [o for o in values if _first(o) and o not in unread]
    while True:
        try:
            cfg = _compose(conf_dir, [*choices, *map(_first, remaining)])
            break
        except HydraException as e:
            bad = _culprit(e, remaining)
            if bad is None:
                return problems  # a problem of the presets themselves: Hydra says it best
            refused.append((bad, e))
            remaining.remove(bad)  # and compose again: the next problem, if any
    present = set(_flat(OmegaConf.to_container(cfg, resolve=False)))
    problems += [unknown_key(o.key_or_group, cfg, present, everywhere, groups, conf_dir) for o in values
                 if not _first(o) and o.key_or_group not in present]  # a sweep whose values cannot be listed
    problems = [_said(o, e, cfg, present, everywhere, groups, conf_dir) for o, e in refused] + problems
    return problems + value_problems(cfg)  # the well-typed values' ranges, said with the rest


def value_problems(cfg) -> list[str]:
    """The composed config's values out of their ranges: the run's sections, the typed groups and each algorithm
    part, by their schemas, without importing torch (what spans groups is :func:`check_run`'s). The typed result is
    kept, so the run's own check does not run these rules again."""
    from fedrun.config.settings import typed

    return list(typed(cfg)[1])


def check_run(args: list[str], conf_dir: str) -> list[str]:
    """A single run's config checked whole (fedrun/config/checks.py, what spans groups too) before Hydra makes its
    folder, so that a refused run leaves nothing behind; [] when it can run (or when Hydra itself refuses the
    command line: it says so as it composes)."""
    from hydra.errors import HydraException

    from fedrun.config.checks import validate
    from fedrun.errors import ConfigError

    words = [a for a in args if "=" in a and not a.startswith("-") and not override_key(a).startswith("hydra")]
    try:
        validate(_compose(conf_dir, words))
    except ConfigError as e:
        return e.problems
    except HydraException:
        pass
    return []


def _first(o) -> str | None:
    """An override as composed for the check: a sweep's first value (each job's own are checked by
    :func:`check_sweep_jobs`); None for a sweep whose values cannot be listed (an Optuna interval)."""
    from hydra.errors import HydraException

    if not o.is_sweep_override():
        return o.input_line
    try:
        return f"{o.get_key_element()}={next(iter(o.sweep_string_iterator()))}"
    except HydraException:
        return None


def _compose(conf_dir: str, overrides: list[str]):
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=conf_dir, version_base="1.3"):
            return compose("config", overrides=overrides)
    finally:
        GlobalHydra.instance().clear()


def _culprit(error, overrides: list):
    """The override a composition error is about: the key its cause names, else the one whose key the message
    quotes (``+fl.lr`` where fl.lr exists); None for an error of the presets themselves."""
    key = getattr(error.__cause__, "full_key", None)
    if key is not None:
        return next((o for o in overrides if o.key_or_group == key), None)
    return next((o for o in overrides if f"'{o.key_or_group}'" in str(error)), None)


def _wrong_type(error) -> bool:
    from omegaconf.errors import ValidationError

    return isinstance(error.__cause__, ValidationError)


def _said(o, error, composed, present: set[str], everywhere: frozenset[str], groups: dict[str, list[str]],
          conf_dir: str) -> str:
    """A refused override's problem in fedrun's words, read against the config composed without the refused ones."""
    key = o.key_or_group
    if o.is_add():
        return f"+{key}: the key exists, so it is set, not added. Fix: {key}={o.input_line.split('=', 1)[1]}"
    if _wrong_type(error):
        fix = OmegaConf.select(composed, key)
        fix = "null" if fix is None else str(fix).lower() if isinstance(fix, bool) else fix
        return f"{o.input_line}: {str(error.__cause__).splitlines()[0]}. Fix: {key}={fix}"
    return unknown_key(key, composed, present, everywhere, groups, conf_dir)


def unknown_option(group: str, option: str, groups: dict[str, list[str]]) -> str:
    elsewhere = [g for g, opts in groups.items() if option in opts and g != group]
    where = ""
    if elsewhere:
        part = elsewhere[0]
        word = PART_WORDS.get(part.split("/")[-1], part)
        where = (f" {option} is a {word}: {part}={option}, on any base (e.g. algo=fedavg {part}={option})"
                 if part.startswith("algo/") else f" {option} is an option of {part}: {part}={option}.")
    return (f"{group}={option}: {group} has no option {option!r}; its options are {', '.join(groups[group])}."
            f"{where or nearest(option, groups[group])}")


def unknown_key(key: str, composed, present: set[str], everywhere: frozenset[str], groups: dict[str, list[str]],
                conf_dir: str) -> str:
    if key in REPLACED:
        return f"{key}: this setting is now part of {REPLACED[key]}. Fix: use that key"
    if key in everywhere:  # a setting of another option of its group (algo.harmonizer.mode with harmonizer none)
        parent = key.rsplit(".", 1)[0]
        owner = parent.replace(".", "/")
        holders = [opt for opt in groups.get(owner, []) if _option_sets(conf_dir, owner, opt, key)]
        chosen = OmegaConf.select(composed, f"{parent}.name")
        belongs = f"; it belongs to {owner}={'|'.join(holders)}" if holders else ""
        return (f"{key}: {owner}={chosen} has no such setting{belongs}. Fix: choose that option, or drop the "
                f"override")
    return f"{key}: no such setting.{nearest(key, present)} (fedrun --cfg job prints every setting)"


@cache
def _option_sets(conf_dir: str, group: str, option: str, key: str) -> bool:
    path = Path(conf_dir) / group / f"{option}.yaml"
    if not path.is_file():  # an option of a hydra.searchpath folder
        return False
    node = conf_node(path)
    part = group.removeprefix("algo/")
    if part in SCHEMAS and node.get("name") in SCHEMAS[part]:  # an algorithm part: its settings are its schema's
        node = node | {f.name: None for f in dataclasses.fields(SCHEMAS[part][node["name"]])}
    return key.split(".")[-1] in node


def check_sweep_jobs(args: list[str], conf_dir: str, limit: int = 5000) -> list[str]:
    """With ``--multirun``: every job's config of the grid (the command line's comma lists and ranges, over the
    ``hydra.sweeper.params`` of the presets it picks) checked as a single run's would be, before the first job starts,
    so a bad value in one job costs no other job's time. Each problem is prefixed with the job's overrides. Sweeps
    whose values cannot be listed (an Optuna interval) or grids over ``limit`` jobs are left to each job's own check."""
    import itertools

    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    from fedrun.config.checks import validate
    from fedrun.errors import ConfigError

    parser = OverridesParser.create()
    words = [a for a in args if "=" in a and not a.startswith("-")]
    try:
        GlobalHydra.instance().clear()
        with initialize_config_dir(config_dir=conf_dir, version_base="1.3"):
            fixed = [w for w, o in zip(words, parser.parse_overrides(words)) if not o.is_sweep_override()]
            head = compose("config", overrides=fixed, return_hydra_config=True)
        preset = {str(k): str(v) for k, v in (OmegaConf.select(head, "hydra.sweeper.params") or {}).items()}
        parsed = parser.parse_overrides(words)
        given = {o.key_or_group for o in parsed}  # the command line wins over a preset's grid
        grid = {k: v for k, v in preset.items() if k not in given} | {
            o.key_or_group: o.input_line.split("=", 1)[1] for o in parsed if o.is_sweep_override()}
        axes = []
        for key, value in grid.items():
            (o,) = parser.parse_overrides([f"{key}={value}"])
            values = o.sweep_string_iterator() if o.is_sweep_override() else [value]
            axes.append([f"{key}={v}" for v in values])
    except (HydraException, ValueError, TypeError):
        return []  # Hydra reports what it cannot read; an unlistable sweep is checked job by job
    finally:
        GlobalHydra.instance().clear()
    if not axes or math.prod(len(a) for a in axes) > limit:
        return []
    problems = []
    for job in itertools.product(*axes):
        overrides = fixed + list(job)
        GlobalHydra.instance().clear()
        try:
            with initialize_config_dir(config_dir=conf_dir, version_base="1.3"):
                validate(compose("config", overrides=overrides))
        except ConfigError as e:
            problems += [f"job {' '.join(job)}: {p}" for p in e.problems]
        except HydraException as e:
            problems.append(f"job {' '.join(job)}: {str(e).splitlines()[0]}")
        finally:
            GlobalHydra.instance().clear()
    return problems
