"""An artefact's runs summarised: one row per run (its grid values, seed, status and values, read from the run's
folder), the mean ± std over seeds per grid point joined with the paper's numbers, the Markdown table with the paper
beside fedrun, and the files ``fedrun-table`` writes (table, CSV, curves), headed by the runs' provenance.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from fedrun.papers import claims
from fedrun.papers import measures
from fedrun.papers.artefacts import (PRESET, RESERVED, Artefact, Paper, grid, normalise, outline, preset_config)
from fedrun.rundir.progress import find_runs
from fedrun.rundir.report import COMPLETE, SUMMARY_FILE, cell, plot_curves, unfinished
from fedrun.rundir.files import (METRICS_FILE, changes_results, commits_of, cpu_model, git_commit, machines_of,
                                 overridden, saved_config)

FIXTURE_FILE = "fixture.json"  # in a preset's sweep folder: the runs there ran on a stand-in for absent data


def _grid_values(run_dir: Path, keys: list[str], config: dict) -> dict[str, str]:
    """The run's value of each grid key: from the overrides Hydra recorded for the job, else from its config (a
    dotted key as it is; a group, ``partition`` or ``algo/harmonizer``, by its option's ``name``). The job's other
    recorded overrides come too, marked ``OTHER`` (collect keeps those that vary), but for ``reuse``, which
    fedrun-table gives every job (where a job looked for a copy, not what it ran)."""
    given = overridden(run_dir)
    out = {f"{OTHER}{k}": normalise(v) for k, v in given.items()
           if k not in keys and k not in ("seed", "experiment", "reuse") and not k.startswith("hydra")}
    for key in keys:
        out[key] = normalise(given[key]) if key in given else _config_value(config, key)
    return out


def _config_value(config: dict, key: str) -> str | None:
    """A setting's value in a run's config: a dotted key as it is; a group (``partition``, ``algo/harmonizer``) by
    its option's ``name``."""
    node = config
    for part in (key.split(".") if "/" not in key and "." in key else [*key.split("/"), "name"]):
        node = node.get(part) if isinstance(node, dict) else None
    return normalise(node) if node is not None else None


def _metrics(run_dir: Path) -> pd.DataFrame | None:
    """The run's metrics.csv indexed by round (read once per run, for all of an artefact's values)."""
    path = run_dir / METRICS_FILE
    return pd.read_csv(path).set_index("round", drop=False) if path.exists() else None


def _value(frame: pd.DataFrame | None, summary: dict, of: str, config: dict) -> float | None:
    """A run's value named by ``of`` (papers.Value): a summary.json key, or a column of its metrics ``frame``
    (_metrics) reduced over its logged rounds (at a round, ``last``, ``max``, ``mean``, ``mean_last_K``,
    ``std_last_K``, or ``target``: at the first round whose test accuracy reached the run's ``eval.target_acc``).
    ``a|b``: a's value, or b's where the run has no a."""
    if "|" in of:
        return next((v for v in (_value(frame, summary, o, config) for o in of.split("|")) if v is not None), None)
    if "@" not in of:
        v = summary.get(of)
        return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None
    column, at = of.split("@")
    if frame is None or column not in frame:
        return None
    logged = frame[column].dropna()
    if at == "target":
        target = (config.get("eval") or {}).get("target_acc")
        reached = frame.index[frame["test_acc"] >= target] if target is not None and "test_acc" in frame else []
        return float(frame.at[reached[0], column]) if len(reached) else None
    if not len(logged):
        return None
    if at == "last":
        return float(logged.iloc[-1])
    if at in ("max", "mean"):
        return float(getattr(logged, at)())
    if at.startswith(("mean_last_", "std_last_")):
        how, k = at.split("_last_")
        return float(getattr(logged.iloc[-int(k):], how)())
    return float(frame.at[int(at), column]) if int(at) in frame.index else None


RUN_COLUMNS = RESERVED  # a run's own columns, beside its grid values and its values


def collect(artefact: Artefact, runs: Path) -> pd.DataFrame:
    """One row per run of the artefact's sweeps: its preset, grid values (the preset's grid keys and any other
    override that varies between its runs), seed, status, values (scaled) and rounds. A measured artefact's rows are
    its measurements (fedrun/papers/measures), one "run" per row."""
    if artefact.measure:
        return _measured(artefact, runs / artefact.name)
    frames = []
    keys = list(dict.fromkeys(k for p in artefact.presets for k in grid(p) if k != "seed"))  # every preset's, so a
    for preset in artefact.presets:  # preset that fixes a key (the reference's algo) has its value in the column
        folder = runs / (artefact.runs_of or artefact.name) / preset
        if not folder.exists():
            continue
        fixture = json.loads((folder / FIXTURE_FILE).read_text())["note"] if (folder / FIXTURE_FILE).exists() else ""
        planned = int(preset_config(preset).fl.rounds)
        rows, configs = [], {}
        for d in find_runs([str(folder)]):
            config = configs[str(d)] = saved_config(d)
            summary = json.loads((d / SUMMARY_FILE).read_text()) if (d / SUMMARY_FILE).exists() else {}
            used_fixture = fixture and str(folder / "fixture-data") == str(config.get("data", {}).get("root"))
            metrics = _metrics(d) if any("@" in v.of for v in artefact.values) else None
            rows.append({"run_dir": str(d), PRESET: preset, **_grid_values(d, keys, config),
                         "seed": config.get("seed"), "status": summary.get("status", "missing"),
                         "error": summary.get("error"), "diverged_round": summary.get("diverged_round"),
                         "rounds_completed": summary.get("rounds_completed"),
                         **{v.name: _scaled(_value(metrics, summary, v.of, config), v.scale) for v in artefact.values},
                         "rounds": int(config.get("fl", {}).get("rounds", planned)), "planned_rounds": planned,
                         "fixture": fixture if used_fixture else "", "summary": summary})
        frame = pd.DataFrame(rows)
        other = [c for c in frame.columns if c.startswith(OTHER)]
        # said in the header: the overrides every run had alike, and those of how a run executed (resume=true on the
        # runs continued, threads), which never split a grid point
        said = sorted(c for c in other if not changes_results(c.removeprefix(OTHER)) or (
            frame[c].notna().all() and frame[c].astype(str).nunique() == 1))
        frame[OVERRIDES] = " ".join(_said(frame, c) for c in said)
        frame = frame.drop(columns=said)
        for c in set(other) - set(said):  # a key of the table: where a run was not given it, its config's value
            frame[c] = [_config_value(configs[d], c.removeprefix(OTHER)) if pd.isna(v) else v
                        for v, d in zip(frame[c], frame["run_dir"])]
        frames.append(_in_grid_order(frame.rename(columns=lambda c: c.removeprefix(OTHER)), grid(preset)))
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def _said(frame: pd.DataFrame, column: str) -> str:
    """An override as the header names it: ``key=value``, ``key=a/b`` where the runs had different values, with
    ``(3 of 5 runs)`` where only some had it."""
    values = frame[column].dropna().astype(str)
    text = f"{column.removeprefix(OTHER)}={'/'.join(dict.fromkeys(values))}"
    return text if len(values) == len(frame) else f"{text} ({len(values)} of {len(frame)} runs)"


def _measured(artefact: Artefact, folder: Path) -> pd.DataFrame:
    """A measured artefact's rows in collect's form: the grid keys (every column that no value reads), ``seed`` (the
    repeat; 0 where the function gives none) and the values; the measurement's record (commit, seconds) in the first
    row's ``summary``, for the header."""
    rows, made = measures.load(folder)
    if rows.empty:
        return rows
    quantities = {v.of for v in artefact.values}
    keys = [c for c in rows.columns if c != "seed" and c not in quantities]
    frame = pd.DataFrame({PRESET: "", **{k: rows[k].map(normalise) for k in keys},
                          "seed": pd.to_numeric(rows["seed"]) if "seed" in rows else 0, "status": "finished",
                          "error": None, "diverged_round": None, "rounds_completed": 1,
                          **{v.name: pd.to_numeric(rows[v.of]) * v.scale if v.of in rows else None
                             for v in artefact.values},
                          "rounds": 1, "planned_rounds": 1, "fixture": "",
                          OVERRIDES: " ".join(f"{k}={v}" for k, v in made["settings"].items())})
    frame["summary"] = [made] + [{}] * (len(frame) - 1)
    return frame


def _in_grid_order(frame: pd.DataFrame, axes: dict[str, list[str]]) -> pd.DataFrame:
    """The runs in the order of the grid's values (as the preset lists them), then by seed."""
    order = {k: {normalise(v): i for i, v in enumerate(vs)} for k, vs in axes.items() if k in frame}
    rank = pd.DataFrame({k: frame[k].map(lambda v, o=o: o.get(v, len(o))) for k, o in order.items()})
    rank["seed"] = pd.to_numeric(frame["seed"], errors="coerce")
    return frame.loc[rank.sort_values(list(rank.columns), kind="stable").index].reset_index(drop=True)


OTHER = "override:"  # a recorded override that is not a grid key: a key of the table only if it varies
OVERRIDES = "overrides"  # (RESERVED) the recorded overrides all runs of a preset had beyond its grid (for the header)


def _scaled(v: float | None, scale: float) -> float | None:
    return None if v is None else v * scale


def grid_keys(artefact: Artefact, runs: pd.DataFrame) -> list[str]:
    names = {v.name for v in artefact.values}
    return [PRESET, *[c for c in runs.columns if c not in RUN_COLUMNS and c not in names and c != PRESET]]


def summary_keys(artefact: Artefact, table: pd.DataFrame) -> list[str]:
    """The grid keys of a summarised table (summarise's): its columns but the counts, notes and statistics."""
    return [k for k in grid_keys(artefact, table) if k not in {"runs", "seeds", "rounds", "planned_rounds", "fixture",
                                                               "note"} and not k.endswith(("_std", "_paper", "_diff"))]


def summarise(artefact: Artefact, runs: pd.DataFrame) -> pd.DataFrame:
    """Per grid point, the mean and std over seeds of each value (runs that finished or diverged; a diverged run
    with its last value), joined with the paper's numbers (a paper cell without runs stays, marked; so does each point
    of a preset's grid still to run, :func:`_pending`), and a note."""
    keys = grid_keys(artefact, runs) if not runs.empty else [PRESET]
    names = [v.name for v in artefact.values]
    done = runs[runs["status"].isin(COMPLETE)] if not runs.empty else runs
    if done.empty:
        table = pd.DataFrame(columns=[*keys, "runs", "seeds", *names, *[f"{n}_std" for n in names], "rounds",
                                      "planned_rounds", "fixture"])
    else:
        grouped = done.groupby(keys, dropna=False, sort=False)
        table = grouped.agg(runs=("seed", "size"), seeds=("seed", "nunique"),
                            **{n: (n, "mean") for n in names}, **{f"{n}_std": (n, "std") for n in names},
                            rounds=("rounds", "min"), planned_rounds=("planned_rounds", "max"),
                            fixture=("fixture", "first")).reset_index()
    paper = artefact.paper_numbers
    if PRESET in paper:  # a table of some of the artefact's presets (--presets) shows their cells only
        paper = paper[paper[PRESET].isin(artefact.presets)]
    on = [k for k in paper.columns if k not in names]
    missing = [k for k in on if k not in table.columns]
    if missing and (table.empty or paper.empty):  # nothing ran yet, or no paper cell of these presets
        table = table.assign(**{k: pd.Series(dtype=object) for k in missing})
    elif missing:
        raise ValueError(f"paper/{artefact.paper}.yaml: {artefact.name}'s paper numbers are keyed by {missing}, "
                         f"which its grid does not sweep (its keys: {keys})")
    paper = paper.rename(columns={n: f"{n}_paper" for n in names})
    if on:  # the runs' rows in grid order, then the paper's cells that no run reached
        table = table.merge(paper, on=on, how="left")
        reached = set(map(tuple, table[on].astype(str).values))
        table = pd.concat([table, paper[[tuple(r) not in reached for r in paper[on].astype(str).values]]],
                          ignore_index=True)
    else:
        table = table.assign(**{f"{n}_paper": None for n in names})
    if not artefact.measure:
        table = pd.concat([table, _pending(artefact, table, runs)], ignore_index=True)
    for n in names:
        table[f"{n}_diff"] = pd.to_numeric(table[n], errors="coerce") - pd.to_numeric(table[f"{n}_paper"],
                                                                                       errors="coerce")
    table["note"] = [_note(artefact, r) for _, r in table.iterrows()]
    return table


def _pending(artefact: Artefact, table: pd.DataFrame, runs: pd.DataFrame) -> pd.DataFrame:
    """A row for each point of each preset's own grid that ``table`` does not hold yet (no run finished there, and no
    paper cell), so that a table says what is still to run. None for a preset whose runs lie off its grid: the runs
    of a sweep of one's own values over a grid key (``fl.lr=0.01,0.1``) make the table that sweep's."""
    rows = []
    for preset in artefact.presets:
        axes = {k: [normalise(v) for v in vs] for k, vs in outline(preset)[0].items() if k != "seed"}
        mine = runs[runs[PRESET] == preset] if not runs.empty else runs
        if any(k in mine and not set(mine[k].dropna().astype(str)) <= set(vs) for k, vs in axes.items()):
            continue
        held = table[table[PRESET] == preset]
        have = set(map(tuple, held[list(axes)].astype(str).values)) if all(k in held for k in axes) else set()
        rows += [{PRESET: preset, **dict(zip(axes, point))} for point in itertools.product(*axes.values())
                 if point not in have]
    return pd.DataFrame(rows)


def _note(artefact: Artefact, row) -> str:
    if pd.isna(row.get("runs")) or not row.get("runs"):
        why = artefact.not_run.get(row.get(PRESET), "")  # its first clause: "too long here", "X cannot be fetched"
        return "no finished run" + (f": {why.split(':')[0]}" if why else "")
    if isinstance(row.get("fixture"), str) and row["fixture"]:
        return f"not reproduced: {row['fixture']}"
    notes = []
    if row["rounds"] < row["planned_rounds"]:
        notes.append(f"shortened: {int(row['rounds'])} of {int(row['planned_rounds'])} rounds")
    diff = row.get(f"{artefact.values[0].name}_diff")
    if artefact.tolerance is not None and not pd.isna(diff):
        notes.append(f"{'within' if abs(diff) <= artefact.tolerance else 'NOT within'} {artefact.tolerance:g} of "
                     "the paper")
    return "; ".join(notes)


def markdown(artefact: Artefact, table: pd.DataFrame) -> str:
    """The table with the artefact's rows down and its columns across: fedrun's mean ± std over seeds beside the
    paper's number, for each value."""
    names = [v.name for v in artefact.values]
    shown = pd.DataFrame(index=table.index)
    for n in names:
        label = "" if n == "value" else f"{n} "
        d = artefact.digits
        shown[f"{label}fedrun"] = [_fmt(m, d) + ("" if pd.isna(s) else f" ± {s:.{d}f}")
                                   for m, s in zip(table[n], table[f"{n}_std"])]
        if table[f"{n}_paper"].notna().any():  # a figure whose numbers the paper does not print: no column
            shown[f"{label}paper"] = table[f"{n}_paper"].map(lambda v: _fmt(v, d))
    measures = list(shown.columns)
    keys = summary_keys(artefact, table)
    named = {*artefact.rows, *artefact.columns}
    keys = [k for k in keys if k in named or table[k].dropna().astype(str).nunique() > 1]  # not the constants
    for k in keys:
        shown[k] = table[k].map(_cell)
    shown["runs"], shown["note"] = table["runs"].map(lambda v: _cell(v if pd.isna(v) else int(v))), table["note"]
    across = [c for c in artefact.columns if c in keys]
    down = [k for k in artefact.rows if k in keys] + [k for k in keys if k not in artefact.rows and k not in across]
    if not across:
        cols = [*down, *measures, "runs", "note"]
        lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
        return "\n".join(lines + ["| " + " | ".join(cell(r[c]) for c in cols) + " |" for _, r in shown.iterrows()])
    wide = shown.pivot_table(index=down, columns=across, values=[*measures, "note"], aggfunc="first", dropna=False,
                             sort=False)
    values = list(dict.fromkeys(wide.columns.droplevel(0)))
    header = [*down, *[f"{m} {_label(v)}" for v in values for m in measures], "note"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for index, r in wide.iterrows():
        index = index if isinstance(index, tuple) else (index,)
        said = {v: r[("note", v)] for v in values if isinstance(r[("note", v)], str) and r[("note", v)]}
        same = len(said) == len(values) and len(set(said.values())) == 1  # one note for the whole row
        notes = next(iter(said.values())) if same else "; ".join(f"{_label(v)}: {n}" for v, n in said.items())
        cells = [*map(str, index), *[_cell(r[(m, v)]) for v in values for m in measures], notes]
        lines.append("| " + " | ".join(cell(c) for c in cells) + " |")
    return "\n".join(lines)


def _fmt(v, digits: int = 2) -> str:
    return "–" if v is None or pd.isna(v) else f"{v:.{digits}f}"


def _label(v) -> str:
    return "/".join(map(str, v)) if isinstance(v, tuple) else str(v)


def _cell(v) -> str:
    return "–" if v is None or (isinstance(v, float) and pd.isna(v)) else str(v)


def provenance(command: str, summaries: list[dict], made: str = "runs") -> str:
    """One sentence for a table's header: the command, this commit, the runs' (or a measurement's) commits,
    compute time and the machines they ran on (runs made before runs recorded theirs: counted, beside the machine
    that makes the table: its CPU and cores, not the threads of the process that renders it)."""
    commits = sorted({c for s in summaries for c in commits_of(s)})
    compute = sum(s.get("total_wall_time_s", s.get("wall_time_s", 0.0)) for s in summaries)
    unknown = sum(1 for s in summaries if "resumed_from_round" in s and "total_wall_time_s" not in s)
    before = (f" (not counting the rounds before the resumption of {unknown} run(s), whose checkpoints predate that "
              "record)" if unknown else "")
    machines = sorted({m for s in summaries for m in machines_of(s)})
    unrecorded = sum(1 for s in summaries if not machines_of(s))
    where = (f" on {', '.join(machines)}" if machines else "") + (
        f"; where {f'{unrecorded} of the' if machines else 'the'} {made} ran is not recorded (this table was made on "
        f"{cpu_model()}, {os.cpu_count()} cores)" if unrecorded else "")
    return (f"Made by `{command}` at commit {git_commit()} on {time.strftime('%Y-%m-%d')} from {len(summaries)} {made} "
            f"made at commit {', '.join(commits) or 'unknown'}; their compute time {compute:.0f} s{before}{where}.")


@dataclass(frozen=True)
class Made:
    """What a table's header says of its runs (:func:`provenance`): how many, their commits, their compute time and
    where they ran."""
    runs: int
    commits: tuple[str, ...]
    compute_s: float
    where: str  # " on <machines>" and/or "; where ... is not recorded (...)", or empty

    @property
    def clean(self) -> bool:
        return bool(self.commits) and not any(c.endswith("-dirty") for c in self.commits)


_MADE = re.compile(r"from (\d+) (?:runs|measurement) made at commit ([^;]+); their compute time (\d+) s(.*?)\.(?=\s|$)")


def read_provenance(text: str) -> Made | None:
    """The runs' part of the header :func:`provenance` writes, read back from a table's text (None without one)."""
    m = _MADE.search(text)
    if m is None:
        return None
    commits = tuple(c for c in m.group(2).split(", ") if c != "unknown")
    return Made(int(m.group(1)), commits, float(m.group(3)), m.group(4))


def write(paper: Paper, artefact: Artefact, runs: pd.DataFrame, out: Path, command: str) -> Path:
    """``<out>/<artefact>.md``, ``.csv``, the claims' verdicts (``<artefact>_claims.csv``: one row per claim and
    point, what results/CLAIMS.md counts) and the figure; returns the Markdown file."""
    table = summarise(artefact, runs)
    summaries = [s for s in runs["summary"] if s or not artefact.measure] if not runs.empty else []
    made_by = provenance(command, summaries, "measurement" if artefact.measure else "runs")  # before writing
    out.mkdir(parents=True, exist_ok=True)
    table.to_csv(out / f"{artefact.name}.csv", index=False)
    seeds = sorted({int(s) for s in runs["seed"].dropna()}) if not runs.empty else []
    described = ', '.join(_described(v) for v in artefact.values)
    how = (f"Mean ± std over repeats {seeds or '–'} of {described}, measured by `{artefact.measure}`"
           + (f" with `{runs[OVERRIDES].iloc[0]}`." if not runs.empty and runs[OVERRIDES].iloc[0] else ".")
           if artefact.measure else f"Mean ± std over seeds {seeds or '–'} of {described}; presets "
           f"{', '.join(f'`experiment={p}`' for p in artefact.presets)}.{_overrides(runs)}")
    checked = verdicts(artefact, runs, table)
    if not checked.empty:
        checked.to_csv(out / f"{artefact.name}_claims.csv", index=False)
        if not runs.empty and not artefact.measure:  # what the verdicts were computed from, so they can be again
            runs_file(runs).to_csv(out / f"{artefact.name}{RUNS_FILE_SUFFIX}", index=False)
    text = [f"# {paper.cite}, {artefact.source}: {artefact.what}\n", f"{paper.reference}. {made_by} {how}\n",
            markdown(artefact, table), claims.markdown(checked)]
    if not runs.empty:
        text.append(unfinished(runs).strip())
    (out / f"{artefact.name}.md").write_text("\n".join(t.rstrip("\n") + "\n" for t in text if t))  # parts apart
    if artefact.figure == "curves" and not runs.empty and not artefact.measure:
        # the runs the table's means are over: a run stopped part-way would draw a curve's tail from fewer seeds
        complete = runs[runs["status"].isin(COMPLETE)]
        for preset, group in complete.groupby(PRESET, sort=False):
            if (group["fixture"] != "").all():  # a few rounds on a stand-in: nothing to see in its curves
                continue
            varying = [k for k in grid_keys(artefact, group) if k != PRESET and group[k].nunique(dropna=True) > 1]
            by = [k for k in dict.fromkeys([*artefact.rows, *artefact.columns, *varying]) if k in varying]
            name = artefact.name if len(artefact.presets) == 1 else \
                f"{artefact.name}_{preset.removeprefix((artefact.runs_of or artefact.name) + '_')}"
            plot_curves(group, by, out / f"{name}.png", f"{paper.cite}, {artefact.source} ({preset}): mean over "
                        "seeds (±1 std)", x=artefact.x, sort=False, metrics=artefact.curves)
    return out / f"{artefact.name}.md"


RUNS_FILE_SUFFIX = "_runs.csv"  # beside <artefact>_claims.csv: each run's row, what its verdicts read


def verdicts(artefact: Artefact, runs: pd.DataFrame, table: pd.DataFrame | None = None) -> pd.DataFrame:
    """The artefact's claims checked on ``runs`` (collect's rows, or :func:`read_runs`'s), over their summary
    ``table`` (summarise's, made here when not given): what ``<artefact>_claims.csv`` holds."""
    table = summarise(artefact, runs) if table is None else table
    return claims.check(artefact.claims, table, summary_keys(artefact, table),
                        frozenset(v.name for v in artefact.values if v.reaching), runs, artefact.not_run,
                        artefact.not_checked, artefact.substitutes)


def runs_file(runs: pd.DataFrame) -> pd.DataFrame:
    """collect's rows as ``<artefact>_runs.csv`` keeps them: each run's preset, grid values, other overrides, seed,
    status, values, rounds and the commit that made it; not its folder (gone with the machine) nor its whole
    summary."""
    commit = [(s or {}).get("commit") for s in runs["summary"]] if "summary" in runs else None
    return runs.drop(columns=[c for c in ("summary", "run_dir") if c in runs]).assign(commit=commit)


def read_runs(path: Path, artefact: Artefact) -> pd.DataFrame:
    """``<artefact>_runs.csv`` (:func:`runs_file`) as collect's rows again: grid values as the text they were, the
    seed, rounds and values as numbers, so that :func:`verdicts` computes from it what it computed from the runs."""
    numeric = {"seed", "rounds", "planned_rounds", "diverged_round", "rounds_completed",
               *(v.name for v in artefact.values)}
    runs = pd.read_csv(path, dtype=str, keep_default_na=False, na_values=[""])
    for column in numeric & set(runs.columns):
        runs[column] = pd.to_numeric(runs[column])
    runs["fixture"] = runs["fixture"].fillna("") if "fixture" in runs else ""
    runs[OVERRIDES] = runs[OVERRIDES].fillna("") if OVERRIDES in runs else ""
    return runs.drop(columns=["commit"], errors="ignore").assign(summary=[{}] * len(runs), run_dir="")


def _overrides(runs: pd.DataFrame) -> str:
    """What the runs on real data had beyond their presets' settings (a fixture's own overrides left out)."""
    if runs.empty or OVERRIDES not in runs:
        return ""
    given = sorted({o for o, f in zip(runs[OVERRIDES], runs["fixture"]) if o and not f})
    return f" Beyond their presets, the runs had {'; '.join(f'`{o}`' for o in given)}." if given else ""


def _described(v) -> str:
    return f"`{v.of}`" + (f" x {v.scale:g}" if v.scale != 1 else "") + ("" if v.name == "value" else f" ({v.name})")
