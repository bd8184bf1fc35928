"""Paper artefacts that are measured rather than trained: a function that ``fedrun-table`` calls in place of a sweep
(``measure: fedrun.papers.measures.<module>:<function>`` in paper/<paper>.yaml). Each takes keyword settings (given on
the command line as ``key=value``) and returns one row per measurement: the artefact's grid keys, ``seed`` (the repeat),
and the raw quantities its values name; fedrun-table keeps the rows, summarises them and joins the paper's numbers as
for runs.
"""

from __future__ import annotations

import importlib
import inspect
import json
import time
from pathlib import Path

import pandas as pd
import yaml

from fedrun.errors import ConfigError

ROWS_FILE = "measured.csv"  # in <runs>/<artefact>/: the rows, kept so that --collect-only re-renders them
MADE_FILE = "measured.json"  # beside it: the settings, commit, date and seconds of the measurement


def function(artefact):
    module, name = artefact.measure.split(":")
    return getattr(importlib.import_module(module), name)


def settings(artefact, overrides: list[str]) -> dict:
    """The function's keyword settings from ``key=value`` overrides (values read as YAML; ``a,b`` is a list),
    refused before any work when a key is not one of its parameters."""
    params = inspect.signature(function(artefact)).parameters
    out, bad = {}, []
    for o in overrides:
        key, given, text = o.partition("=")
        if not given:
            bad.append(f"{o!r}: give a setting as key=value ({next(iter(params), 'repeats')}=...)")
            continue
        if key not in params:
            bad.append(f"{o!r}: {artefact.name} is measured by {artefact.measure}, whose settings are "
                       f"{', '.join(f'{k}={p.default!r}' for k, p in params.items())}")
            continue
        value = yaml.safe_load(f"[{text}]" if "," in text and not text.startswith("[") else text)
        out[key] = tuple(value) if isinstance(value, list) else value
    if bad:
        raise ConfigError(bad)
    return out


def run(artefact, folder: Path, overrides: list[str], log=print) -> int:
    """Measure the artefact into ``folder`` unless a measurement with the same settings is there; returns 1 when it
    measured, 0 when it kept the one there."""
    from fedrun.rundir.files import git_commit

    given = settings(artefact, overrides)
    made = folder / MADE_FILE
    if made.exists() and (folder / ROWS_FILE).exists() and json.loads(made.read_text())["settings"] == \
            json.loads(json.dumps(given)):
        return 0
    log(f"fedrun-table: measuring {artefact.name} with {artefact.measure}({given or ''})")
    started = time.perf_counter()
    rows = pd.DataFrame(function(artefact)(**given))
    seconds = time.perf_counter() - started
    folder.mkdir(parents=True, exist_ok=True)
    rows.to_csv(folder / ROWS_FILE, index=False)
    made.write_text(json.dumps({"settings": given, "git_commit": git_commit(), "wall_time_s": seconds,
                                "date": time.strftime("%Y-%m-%d")}) + "\n")
    return 1


def load(folder: Path) -> tuple[pd.DataFrame, dict]:
    """The rows and the record of the measurement in ``folder`` (empty where none was made)."""
    if not (folder / ROWS_FILE).exists():
        return pd.DataFrame(), {}
    return pd.read_csv(folder / ROWS_FILE, dtype=str), json.loads((folder / MADE_FILE).read_text())
