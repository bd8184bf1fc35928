"""``fedrun-table``: a paper's table or figure, run as the sweep its presets define and summarised beside the paper's
own numbers (paper/<paper>.yaml).

    fedrun-table --list                                  # every artefact, its grid size and the data it needs
    fedrun-table bherd_fig5a [--seeds K] [overrides...]  # run the sweep (fedrun -m), then write the table
    fedrun-table bherd_fig5a hydra/launcher=slurm        # any Hydra launcher; finished jobs are skipped
    fedrun-table bherd_fig5a --collect-only              # summarise the runs that exist (a sweep run elsewhere)

Each preset of the artefact runs as ``fedrun -m experiment=<preset> seed=0,..,K-1 <overrides>`` into
``<runs>/<artefact>/<preset>/`` (one folder per grid point, named by its values), so ``resume=true``, launchers and
skipping of finished jobs work as for any sweep. The summary is fedrun-report's (mean ± std over seeds), joined with
the paper's numbers; rows whose data was absent (a fixture in the dataset's format stood in) or whose runs were
shortened are marked, and jobs that did not finish are listed under the table. Writes ``<out>/<artefact>.md``,
``.csv`` and the figure (``.png``) into ``results/<paper>/`` unless ``--out`` says otherwise.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from dataclasses import replace
from functools import lru_cache
from pathlib import Path

import pandas as pd
import yaml

from .errors import FedrunError
from .papers import PRESET, Artefact, Paper, artefacts, normalise
from .report import SUMMARY_FILE, cell, find_runs, plot_curves, unfinished
from .results import CONFIG_FILE, METRICS_FILE, git_commit

FIXTURE_FILE = "fixture.json"  # in a preset's sweep folder: the runs there ran on a stand-in for absent data


def grid(preset: str, overrides: list[str] = ()) -> dict[str, list[str]]:
    """The preset's grid (its ``hydra.sweeper.params``) with the sweeps among ``overrides`` (``seed=0,1,2``): each
    key's values, in order."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    params = _composed(preset).hydra.sweeper.params or {}
    axes = {str(k): [v.strip() for v in str(vs).split(",")] for k, vs in params.items()}
    for o in OverridesParser.create().parse_overrides([o for o in overrides if "=" in o]):
        if o.is_sweep_override():
            axes[o.key_or_group] = [str(v) for v in o.sweep_string_iterator()]
        elif o.key_or_group in axes:  # one value of a grid key: the command line's, as Hydra takes it
            axes[o.key_or_group] = [o.input_line.split("=", 1)[1]]
    return axes


@lru_cache(maxsize=None)
def _composed(preset: str):
    from .compose import compose_config

    return compose_config([f"experiment={preset}"], hydra=True)


def preset_config(preset: str, overrides: list[str] = ()):
    """The config a job of the preset runs with ``overrides`` (their sweeps and Hydra's own keys aside)."""
    from .compose import compose_config

    given = [o for o in overrides if not _is_sweep(o) and not _key(o).startswith("hydra")]
    return compose_config([f"experiment={preset}", *given]) if given else _composed(preset)


def _is_sweep(override: str) -> bool:
    from hydra.core.override_parser.overrides_parser import OverridesParser

    key = override.split("=", 1)[0]
    return not key.startswith("hydra") and OverridesParser.create().parse_override(override).is_sweep_override()


def _key(override: str) -> str:
    return override.split("=", 1)[0].lstrip("+~")


def sweep_command(preset: str, folder: Path, overrides: list[str]) -> list[str]:
    """``fedrun -m`` over the preset's grid into ``folder``, one subfolder per grid point named by its grid values
    and seed (other constant overrides left out of the name), so that a job keeps its folder however the grid
    grows."""
    axes = {*grid(preset), "seed"}
    constant = sorted({_key(o) for o in overrides if not _is_sweep(o) and not _key(o).startswith("hydra")
                       and _key(o) not in axes} | {"experiment"})
    return [sys.executable, "-m", "fedrun.cli", "-m", f"experiment={preset}", *overrides,
            f"hydra.sweep.dir={folder}", "hydra.sweep.subdir=${hydra.job.override_dirname}",
            f"hydra.job.config.override_dirname.exclude_keys=[{','.join(constant)}]"]


def _stand_in(preset: str, folder: Path, overrides: list[str], fixture_rounds: int) -> list[str]:
    """Overrides that point a preset whose dataset is absent at a fixture in the dataset's own file format (written
    once, under the sweep folder) for ``fixture_rounds`` rounds; the note goes to the folder's fixture.json."""
    from .data import DATASETS, resolve_root
    from .data.fixtures import stand_in

    cfg = preset_config(preset, overrides)
    spec = DATASETS[cfg.data.name]
    if spec.is_present(resolve_root(cfg.data.root)):
        if (folder / FIXTURE_FILE).exists():  # its finished fixture runs would pass for runs on the real data
            raise FedrunError(f"{folder} holds runs on a fixture of {cfg.data.name}, which is present now: move "
                              "that folder aside (or use another --runs) to run on the real data")
        return []
    extra, size = stand_in(cfg.data.name, folder / "fixture-data")
    note = f"{cfg.data.name} absent: ran on a fixture of {size} for {fixture_rounds} rounds"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / FIXTURE_FILE).write_text(json.dumps({"dataset": cfg.data.name, "note": note}) + "\n")
    return [f"data.root={folder / 'fixture-data'}", *extra, f"fl.rounds={fixture_rounds}"]


def _stamps(folder: Path) -> dict[Path, int]:
    return {p: p.stat().st_mtime_ns for p in folder.rglob(SUMMARY_FILE)} if folder.exists() else {}


def run(artefact: Artefact, runs: Path, overrides: list[str], fixture_rounds: int, log=print) -> int:
    """Run every preset's sweep; returns how many jobs ran (finished jobs are skipped by fedrun itself)."""
    ran = 0
    for preset in artefact.presets:
        folder = runs / (artefact.runs_of or artefact.name) / preset
        extra = _stand_in(preset, folder, overrides, fixture_rounds)
        before = _stamps(folder)
        cmd = sweep_command(preset, folder, [*overrides, *extra])
        log(f"fedrun-table: {' '.join(cmd[2:])}")
        done = subprocess.run(cmd, check=False)  # a failed job is recorded in its folder, listed under the table
        if done.returncode == 2:  # refused before any job ran: a bad override, said above by fedrun itself
            raise FedrunError(f"fedrun refused the sweep of {preset} (its message is above); nothing ran")
        after = _stamps(folder)
        ran += sum(1 for p, t in after.items() if before.get(p) != t)
    return ran


def _grid_values(run_dir: Path, keys: list[str], config: dict) -> dict[str, str]:
    """The run's value of each grid key: from the overrides Hydra recorded for the job, else from its config (a
    dotted key as it is; a group, ``partition`` or ``algo/harmonizer``, by its option's ``name``). The job's other
    recorded overrides come too, marked ``OTHER`` (collect keeps those that vary)."""
    recorded = run_dir / ".hydra" / "overrides.yaml"
    given = {}
    if recorded.exists():
        given = {_key(o): o.split("=", 1)[1] for o in yaml.safe_load(recorded.read_text()) or [] if "=" in o}
    out = {f"{OTHER}{k}": normalise(v) for k, v in given.items()
           if k not in keys and k not in ("seed", "experiment") and not k.startswith("hydra")}
    for key in keys:
        if key in given:
            out[key] = normalise(given[key])
            continue
        node = config
        for part in (key.split(".") if "/" not in key and "." in key else [*key.split("/"), "name"]):
            node = node.get(part) if isinstance(node, dict) else None
        out[key] = normalise(node) if node is not None else None
    return out


def _value(run_dir: Path, summary: dict, of: str) -> float | None:
    if "@" in of:  # a metrics.csv column at a round, or at the last round that logged it
        column, at = of.split("@")
        metrics = run_dir / METRICS_FILE
        if not metrics.exists():
            return None
        frame = pd.read_csv(metrics).set_index("round")
        if column not in frame:
            return None
        if at == "last":
            logged = frame[column].dropna()
            return float(logged.iloc[-1]) if len(logged) else None
        return float(frame.at[int(at), column]) if int(at) in frame.index else None
    v = summary.get(of)
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


RUN_COLUMNS = {"run_dir", PRESET, "seed", "status", "error", "diverged_round", "rounds_completed", "rounds",
               "planned_rounds", "fixture", "summary"}


def collect(artefact: Artefact, runs: Path) -> pd.DataFrame:
    """One row per run of the artefact's sweeps: its preset, grid values (the preset's grid keys and any other
    override that varies between its runs), seed, status, values (scaled) and rounds."""
    frames = []
    for preset in artefact.presets:
        folder = runs / (artefact.runs_of or artefact.name) / preset
        if not folder.exists():
            continue
        keys = [k for k in grid(preset) if k != "seed"]
        fixture = json.loads((folder / FIXTURE_FILE).read_text())["note"] if (folder / FIXTURE_FILE).exists() else ""
        planned = int(preset_config(preset).fl.rounds)
        rows = []
        for d in find_runs([str(folder)]):
            config = yaml.safe_load((d / CONFIG_FILE).read_text()) or {}
            summary = json.loads((d / SUMMARY_FILE).read_text()) if (d / SUMMARY_FILE).exists() else {}
            used_fixture = fixture and str(folder / "fixture-data") == str(config.get("data", {}).get("root"))
            rows.append({"run_dir": str(d), PRESET: preset, **_grid_values(d, keys, config),
                         "seed": config.get("seed"), "status": summary.get("status", "missing"),
                         "error": summary.get("error"), "diverged_round": summary.get("diverged_round"),
                         "rounds_completed": summary.get("rounds_completed"),
                         **{v.name: _scaled(_value(d, summary, v.of), v.scale) for v in artefact.values},
                         "rounds": int(config.get("fl", {}).get("rounds", planned)), "planned_rounds": planned,
                         "fixture": fixture if used_fixture else "", "summary": summary})
        frame = pd.DataFrame(rows)
        varying = [c for c in frame.columns if c.startswith(OTHER)]
        frame = frame.drop(columns=[c for c in varying if frame[c].astype(str).nunique() < 2])
        frames.append(_in_grid_order(frame.rename(columns=lambda c: c.removeprefix(OTHER)), grid(preset)))
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def _in_grid_order(frame: pd.DataFrame, axes: dict[str, list[str]]) -> pd.DataFrame:
    """The runs in the order of the grid's values (as the preset lists them), then by seed."""
    order = {k: {normalise(v): i for i, v in enumerate(vs)} for k, vs in axes.items() if k in frame}
    rank = pd.DataFrame({k: frame[k].map(lambda v, o=o: o.get(v, len(o))) for k, o in order.items()})
    rank["seed"] = pd.to_numeric(frame["seed"], errors="coerce")
    return frame.loc[rank.sort_values(list(rank.columns), kind="stable").index].reset_index(drop=True)


OTHER = "override:"  # a recorded override that is not a grid key: a key of the table only if it varies


def _scaled(v: float | None, scale: float) -> float | None:
    return None if v is None else v * scale


def grid_keys(artefact: Artefact, runs: pd.DataFrame) -> list[str]:
    names = {v.name for v in artefact.values}
    return [PRESET, *[c for c in runs.columns if c not in RUN_COLUMNS and c not in names and c != PRESET]]


def summarise(artefact: Artefact, runs: pd.DataFrame) -> pd.DataFrame:
    """Per grid point, the mean and std over seeds of each value (runs that finished or diverged; a diverged run
    with its last value), joined with the paper's numbers (a paper cell without runs stays, marked), and a note."""
    keys = grid_keys(artefact, runs) if not runs.empty else [PRESET]
    names = [v.name for v in artefact.values]
    done = runs[runs["status"].isin(["finished", "diverged"])] if not runs.empty else runs
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
    if missing and table.empty:  # nothing ran yet: the paper's cells alone
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
    for n in names:
        table[f"{n}_diff"] = pd.to_numeric(table[n], errors="coerce") - pd.to_numeric(table[f"{n}_paper"],
                                                                                       errors="coerce")
    table["note"] = [_note(artefact, r) for _, r in table.iterrows()]
    return table


def _note(artefact: Artefact, row) -> str:
    if pd.isna(row.get("runs")) or not row.get("runs"):
        return "no finished run"
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
    keys = [k for k in grid_keys(artefact, table) if k in table.columns and k not in
            {"runs", "seeds", "rounds", "planned_rounds", "fixture", "note"} and not k.endswith(("_std", "_paper",
                                                                                               "_diff"))]
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


def provenance(command: str, summaries: list[dict]) -> str:
    """One sentence for a table's header: the command, this commit, the runs' commits, compute time, machine."""
    import torch

    from .bench import device_name

    commits = sorted({str(c) for s in summaries for c in s.get("git_commits") or [s.get("git_commit")] if c})
    compute = sum(s.get("total_wall_time_s", s.get("wall_time_s", 0.0)) for s in summaries)
    unknown = sum(1 for s in summaries if "resumed_from_round" in s and "total_wall_time_s" not in s)
    before = (f" (not counting the rounds before the resumption of {unknown} run(s), whose checkpoints predate that "
              "record)" if unknown else "")
    return (f"Made by `{command}` at commit {git_commit()} on {time.strftime('%Y-%m-%d')} from {len(summaries)} runs "
            f"made at commit {', '.join(commits) or 'unknown'}; their compute time {compute:.0f} s{before} on "
            f"{device_name(torch.device('cpu'))}.")


def write(paper: Paper, artefact: Artefact, runs: pd.DataFrame, out: Path, command: str) -> Path:
    """``<out>/<artefact>.md``, ``.csv`` and the figure; returns the Markdown file."""
    table = summarise(artefact, runs)
    made_by = provenance(command, [s for s in runs["summary"]] if not runs.empty else [])  # before writing
    out.mkdir(parents=True, exist_ok=True)
    table.to_csv(out / f"{artefact.name}.csv", index=False)
    seeds = sorted({int(s) for s in runs["seed"].dropna()}) if not runs.empty else []
    text = [f"# {paper.cite}, {artefact.source}: {artefact.what}\n",
            f"{paper.reference}. {made_by} Mean ± std over seeds {seeds or '–'} of "
            f"{', '.join(_described(v) for v in artefact.values)}; presets "
            f"{', '.join(f'`experiment={p}`' for p in artefact.presets)}.\n", markdown(artefact, table)]
    if not runs.empty:
        text.append(unfinished(runs).strip())
    (out / f"{artefact.name}.md").write_text("\n".join(t for t in text if t) + "\n")
    if artefact.figure == "curves" and not runs.empty:
        for preset, group in runs.groupby(PRESET, sort=False):
            if (group["fixture"] != "").all():  # a few rounds on a stand-in: nothing to see in its curves
                continue
            varying = [k for k in grid_keys(artefact, group) if k != PRESET and group[k].nunique(dropna=True) > 1]
            by = [k for k in dict.fromkeys([*artefact.rows, *artefact.columns, *varying]) if k in varying]
            name = artefact.name if len(artefact.presets) == 1 else \
                f"{artefact.name}_{preset.removeprefix(artefact.name + '_')}"
            plot_curves(group, by, out / f"{name}.png", f"{paper.cite}, {artefact.source} ({preset}): mean over "
                        "seeds (±1 std)", x=artefact.x, sort=False, metrics=artefact.curves)
    return out / f"{artefact.name}.md"


def _described(v) -> str:
    return f"`{v.of}`" + (f" x {v.scale:g}" if v.scale != 1 else "") + ("" if v.name == "value" else f" ({v.name})")


def listing() -> str:
    from .data import DATASETS, resolve_root

    lines = ["| artefact | paper | source | jobs per seed | data (present here?) |", "|---|---|---|---|---|"]
    for name, (paper, a) in artefacts().items():
        size, data = 0, []
        for preset in a.presets:
            n = 1
            for values in grid(preset).values():
                n *= len(values)
            size += n
            dataset = preset_config(preset).data.name
            present = DATASETS[dataset].is_present(resolve_root(None))
            data.append(f"{dataset} ({'yes' if present else 'no: a fixture stands in'})")
        shared = f" (the runs of {a.runs_of})" if a.runs_of else ""
        lines.append(f"| {name} | {paper.cite} | {a.source} | {size}{shared} | {', '.join(dict.fromkeys(data))} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="fedrun-table", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("artefact", nargs="?", help="an artefact's name (fedrun-table --list names them)")
    parser.add_argument("overrides", nargs="*", help="Hydra overrides for every job (a launcher, fl.rounds=..., "
                                                     "resume=true, a sweep of your own: key=a,b)")
    parser.add_argument("--list", action="store_true", help="name every artefact, its grid size and its data")
    parser.add_argument("--seeds", type=int, default=1, help="seeds 0..K-1 per grid point")
    parser.add_argument("--presets", default=None, help="only these of the artefact's presets (comma-separated)")
    parser.add_argument("--collect-only", action="store_true", help="summarise the runs under --runs; run nothing")
    parser.add_argument("--fixture-rounds", type=int, default=2, help="rounds of a job whose data is absent")
    parser.add_argument("--runs", default="outputs/tables", help="the sweeps' folder (<runs>/<artefact>/<preset>)")
    parser.add_argument("--out", default=None, help="where the table goes (default: results/<paper>)")
    args = parser.parse_intermixed_args(argv)  # options and overrides in any order
    if args.list:
        print(listing())
        return 0
    known = artefacts()
    if args.artefact is None:
        parser.error("name an artefact (fedrun-table --list names them)")
    if args.artefact not in known:
        from .overrides import nearest

        parser.error(f"unknown artefact {args.artefact!r}.{nearest(str(args.artefact), known)} "
                     "fedrun-table --list names them")
    paper, artefact = known[args.artefact]
    if args.presets:
        chosen = [p.strip() for p in args.presets.split(",")]
        unknown = [p for p in chosen if p not in artefact.presets]
        if unknown:
            parser.error(f"--presets {','.join(unknown)}: not a preset of {artefact.name}; its presets: "
                         f"{','.join(artefact.presets)}")
        artefact = replace(artefact, presets=tuple(chosen))
    overrides = list(args.overrides)
    if not any(_key(o) == "seed" for o in overrides):  # named in every job's folder, so more seeds add folders
        overrides.append("seed=" + ",".join(map(str, range(args.seeds))))
    runs = Path(args.runs)
    if not args.collect_only:
        try:
            ran = run(artefact, runs, overrides, args.fixture_rounds)
        except FedrunError as e:
            print(f"fedrun-table: {e}", file=sys.stderr)
            return 2
        print(f"fedrun-table: {ran} job(s) ran")
    found = collect(artefact, runs)
    if found.empty:
        print(f"fedrun-table: no runs of {artefact.name} under {runs / artefact.name}", file=sys.stderr)
        return 2
    command = "fedrun-table " + " ".join(argv if argv is not None else sys.argv[1:])
    path = write(paper, artefact, found, Path(args.out or f"results/{paper.key}"), command)
    print(path.read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
