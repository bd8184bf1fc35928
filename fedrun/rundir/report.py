"""``fedrun-report``: collect run directories into one table (mean and std over seeds) and accuracy curves.

    fedrun-report multirun/2026-11-21/12-00-00            # a sweep directory (searched recursively)
    fedrun-report RUN_A RUN_B --by method,fl.local_epochs --out report/

For a sweep's folder it first says how far the sweep is: its runs complete, failed, running and still to start, and
roughly how long it has left. Rows are grouped by the config keys given with --by, or by default by the method
(``fedavg+fedgh``, ...) and every other key whose value differs between the runs and can change results (the seed
excepted; not how a run executed, was checkpointed or resumed: fedrun.rundir.files.changes_results, the list the
staleness check uses), so a sweep reports what it swept. Means and stds are over the complete runs (finished, or
diverged: a run that fails to converge is a result); each row says how many runs it has and how many of them finished.
Runs that did not finish are listed after the table: diverged (with the round; counted in the means) and, kept out of
them, failed (with the error), interrupted (checkpointed by SIGTERM/Ctrl-C: with the command that continues it), running
(its round and time left, or probably killed) and missing (no summary). ``--out`` also draws each group's mean curve
over the same complete runs, and each unfinished run's own, dashed.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pandas as pd

from fedrun.rundir.files import (COMPLETE, CONFIG_FILE, METRICS_FILE, SUMMARY_FILE, changes_results, overridden,
                                 saved_config)
from fedrun.rundir.progress import find_runs, progress

IGNORED_KEYS = {"seed"}
VALUE_COLUMNS = ["final_test_acc", "best_test_acc", "rounds_to_target", "wall_time_s"]
NAME_KEYS = ("algo.name", "algo.local.name", "algo.step_selector.name", "algo.harmonizer.name", "algo.aggregator.name",
             "algo.server_opt.name", "algo.schedule.name", "algo.bank.name")  # what ``method`` already says
STATUS_COLUMNS = ["status", "error", "diverged_round", "rounds_completed"]
NAMED = "_named"  # the keys a run's command line set (its recorded overrides)


def _flatten(d: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out |= _flatten(v, key + ".")
        else:
            out[key] = tuple(v) if isinstance(v, list) else v
    return out


def load_runs(run_dirs: list[Path]) -> pd.DataFrame:
    rows = []
    for d in run_dirs:
        cfg = _flatten(saved_config(d))
        summary = json.loads((d / SUMMARY_FILE).read_text()) if (d / SUMMARY_FILE).exists() else {"status": "missing"}
        method = summary.get("method") or _method(cfg)
        # a resumed run's time is all its processes' (total_wall_time_s), not its last one's
        summary["wall_time_s"] = summary.get("total_wall_time_s", summary.get("wall_time_s"))
        rows.append({"run_dir": str(d), "method": method, **cfg,
                     **{k: summary.get(k) for k in VALUE_COLUMNS + STATUS_COLUMNS},
                     NAMED: frozenset(overridden(d))})
    return pd.DataFrame(rows)


def _method(flat: dict) -> str | None:
    """The method of a run whose summary does not name it (made before fedrun recorded it), from its config."""
    from omegaconf import OmegaConf

    from fedrun.algorithms import method_name

    algo = {k.removeprefix("algo."): v for k, v in flat.items() if k.startswith("algo.")}
    try:
        return method_name(OmegaConf.create(_unflatten(algo)))
    except Exception:  # noqa: BLE001 - a config too old or partial to name: group by its keys instead
        return None


def _unflatten(flat: dict) -> dict:
    out: dict = {}
    for key, value in flat.items():
        node = out
        *parents, last = key.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[last] = list(value) if isinstance(value, tuple) else value
    return out


def varying_keys(df: pd.DataFrame) -> list[str]:
    """The keys whose value differs between the runs: the method first, then the others (not the part names the
    method already says, nor the seed). Of keys that hold the same value in every run (one derived from the other by
    an interpolation: ``fl.reshuffle`` is ``${algo.step_selector.reshuffle}``), one: the one the runs' command lines
    set, else the first."""
    skip = set(VALUE_COLUMNS) | set(STATUS_COLUMNS) | {"run_dir", NAMED} | IGNORED_KEYS
    if "method" in df and df["method"].notna().all():
        skip |= set(NAME_KEYS)
    named = set().union(*df[NAMED]) if NAMED in df else set()
    keys: dict[tuple, str] = {}  # each distinct column of values, by its values: the key that stands for it
    for col in df.columns:
        if col in skip or col.startswith("hydra.") or not changes_results(col):
            continue
        values = df[col].dropna()  # a key only some runs have (a part's own setting) is not a difference
        if values.astype(str).nunique() > 1:
            same = tuple(df[col].astype(str))
            if same not in keys or (col in named and keys[same] not in named):
                keys[same] = col
    return sorted(keys.values(), key=list(df.columns).index)


def summarize(df: pd.DataFrame, by: list[str]) -> pd.DataFrame:
    """Mean and std over seeds (and any other unlisted key) of each group's complete runs (finished or diverged);
    ``runs`` counts every run of the group, ``finished`` those that finished, ``seeds`` the seeds of the complete
    ones. A group none of whose runs is complete has no means."""
    work = df.copy()
    for c in VALUE_COLUMNS:
        work[c] = pd.to_numeric(work[c], errors="coerce")
    status = work["status"] if "status" in work else pd.Series("finished", index=work.index)
    complete = status.isin(COMPLETE)
    work.loc[~complete, VALUE_COLUMNS] = np.nan
    work["_finished"] = (status == "finished").astype(int)
    work["_seed"] = work.get("seed", pd.Series(0, index=work.index)).where(complete)  # no seed column: one seed
    grouped = work.groupby(by, dropna=False, sort=True) if by else work.assign(group="all runs").groupby("group")
    table = grouped[VALUE_COLUMNS].agg(["mean", "std"])
    table.columns = [f"{a}_{b}" for a, b in table.columns]
    table.insert(0, "runs", grouped.size().astype(int))
    table.insert(1, "finished", grouped["_finished"].sum().astype(int))
    table.insert(2, "seeds", grouped["_seed"].nunique().astype(int))
    return table.reset_index()


def markdown(table: pd.DataFrame) -> str:
    """The table as Markdown: counts as integers, a value that does not exist (one seed's std, a target never
    reached) as a dash."""
    shown = table.copy().astype(object)
    for col in shown.columns:
        if col in ("runs", "finished", "seeds"):
            shown[col] = [str(int(v)) for v in table[col]]
        elif pd.api.types.is_float_dtype(table[col]):
            shown[col] = ["–" if pd.isna(v) else f"{v:.4f}" for v in table[col]]
        else:
            shown[col] = ["–" if v is None or (isinstance(v, float) and pd.isna(v)) else cell(v) for v in table[col]]
    return shown.to_markdown(index=False, disable_numparse=True)


def cell(value) -> str:
    """A value as one Markdown table cell: one line, with its pipes escaped."""
    return " ".join(str(value).split()).replace("|", "\\|")


def unfinished(df: pd.DataFrame) -> str:
    """Markdown list of the runs whose status is not ``finished``, or "" when all finished: diverged runs (counted in
    the means), and the others (left out of them), each with what to do about it."""
    from fedrun.rundir.checkpoint import checkpoints
    from fedrun.rundir.resume import resume_command

    bad = df[df["status"] != "finished"]
    if bad.empty:
        return ""
    left_out = int((~bad["status"].isin(COMPLETE)).sum())
    lines = [f"\n\n## {len(bad)} of {len(df)} runs did not finish ({left_out} left out of the means)\n",
             "| run | status | detail |", "|---|---|---|"]
    for _, r in bad.iterrows():
        held = checkpoints(r["run_dir"])
        go_on = (f"continue it with `{resume_command(r['run_dir'])}`" if held else
                 "no checkpoint was written, so it starts over when run again")
        detail = (f"diverged at round {int(r['diverged_round'])} (counted in the means)" if r["status"] == "diverged"
                  else r["error"] + (f"; {go_on}" if held else "") if isinstance(r["error"], str) else
                  "no summary.json: killed before it could write one" if r["status"] == "missing" else
                  f"interrupted{_after(r['rounds_completed'])}: {go_on}" if r["status"] == "interrupted" else
                  f"{progress(r['run_dir'])}: {go_on}")
        lines.append(f"| {r['run_dir']} | {r['status']} | {cell(detail)} |")
    return "\n".join(lines) + "\n"


def _after(rounds) -> str:
    return "" if rounds is None or pd.isna(rounds) else f" after round {int(rounds)}"


def on_common_grid(curves: list[pd.Series], points: int = 200) -> list[pd.Series]:
    """Curves logged at each run's own x values (simulated seconds), interpolated linearly onto ``points`` values
    spanning the range all of them cover, so that they can be averaged."""
    grid = np.linspace(max(c.index.min() for c in curves), min(c.index.max() for c in curves), points)
    return [pd.Series(np.interp(grid, c.index, c.values), index=grid) for c in curves]


def zoom(means: list[pd.Series], share: float = 0.25) -> tuple[float, float, float, float] | None:
    """The box (x0, x1, y0, y1) that shows the second half of the curves ``means`` (their x range's) with a tenth of
    its height to spare, or None when that box is more than ``share`` of the whole plot's height: curves that meet
    near a plateau (accuracy after the first rounds) differ there by less than a line's width at full scale."""
    lo, hi = min(m.index.min() for m in means), max(m.index.max() for m in means)
    x0 = (lo + hi) / 2
    tail = pd.concat([m[m.index >= x0] for m in means])
    whole = pd.concat(means)
    if tail.empty or not np.isfinite(tail).all():
        return None
    y0, y1 = float(tail.min()), float(tail.max())
    pad = (y1 - y0) / 10 or abs(y1) / 1000 or 1e-3
    if y1 - y0 + 2 * pad > share * (whole.max() - whole.min()):
        return None
    return float(x0), float(hi), y0 - pad, y1 + pad


class Curves(NamedTuple):
    """One group's curves of one metric: the mean and std over its complete runs (None when it has none), and each
    unfinished run's own curve (a run still going, stopped or failed part-way)."""
    label: str
    complete: int
    mean: pd.Series | None
    std: pd.Series | None
    unfinished: list[pd.Series]


def curve_groups(df: pd.DataFrame, by: list[str], metric: str, logs: dict[str, pd.DataFrame], x: str = "round",
                 sort: bool = True) -> list[Curves]:
    """Each group's :class:`Curves` of ``metric`` against ``x`` from the runs' metrics.csv (``logs``, by run
    directory). The mean is over the complete runs only, as the table's means are (a diverged run with its last value
    to the end): a run stopped part-way would otherwise draw the mean's tail from fewer seeds, a step where it stops.
    A run without a ``status`` is complete."""
    out = []
    groups = list(df.groupby(by, dropna=False, sort=sort)) if by else [("all", df)]
    for key, g in groups:
        status = g["status"] if "status" in g else pd.Series("finished", index=g.index)
        curves = {d: logs[d].dropna(subset=[metric]).set_index(x)[metric] for d in g["run_dir"]
                  if d in logs and metric in logs[d]}
        done = [(c, s) for d, s in zip(g["run_dir"], status) if s in COMPLETE and len(c := curves.get(d, ())) > 0]
        running = [c for d, s in zip(g["run_dir"], status) if s not in COMPLETE and len(c := curves.get(d, ())) > 0]
        if not done and not running:
            continue
        label = ", ".join(f"{k}={v}" for k, v in zip(by, key if isinstance(key, tuple) else (key,))) or "all"
        mean = std = None
        if done:
            parts = [c for c, _ in done]
            frame = pd.concat(parts if x == "round" else on_common_grid(parts), axis=1, ignore_index=True)
            for i, (_, s) in enumerate(done):
                if s == "diverged" and x == "round":  # it counts with its last value to the end, as in the table
                    frame[i] = frame[i].ffill()
            mean, std = frame.mean(axis=1), frame.std(axis=1).fillna(0)
        out.append(Curves(label, len(done), mean, std, running))
    return out


def plot_curves(df: pd.DataFrame, by: list[str], path: Path, title: str = "", x: str = "round",
                sort: bool = True, metrics: tuple[str, ...] = ("test_acc",)) -> None:
    """Each group's mean (±1 std over its complete runs, :func:`curve_groups`) of each metrics.csv column in
    ``metrics``, one panel each (test accuracy by default), against ``x``: the round, or a column such as
    ``sim_time_s`` (the runs' curves then put on one grid, :func:`on_common_grid`). Each unfinished run is drawn on
    its own, dashed, in its group's colour, so that a sweep can be watched while it runs. A panel skips the runs that
    do not log its column; where its means end on a plateau it adds an inset of their second half, magnified
    (:func:`zoom`)."""
    import textwrap

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    fig, axes = plt.subplots(1, len(metrics), figsize=(7 * len(metrics), 4.5), squeeze=False)
    logs = {d: pd.read_csv(Path(d) / METRICS_FILE) for d in df["run_dir"] if (Path(d) / METRICS_FILE).exists()}
    palette = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    colours: dict[str, str] = {}  # a group's colour, the same in every panel (a panel may lack some groups)
    for ax, metric in zip(axes[0], metrics):
        drawn = []  # (mean, its line's colour)
        for group in curve_groups(df, by, metric, logs, x=x, sort=sort):
            label = f"{group.label} (n={group.complete}" + (
                f"; {len(group.unfinished)} unfinished, dashed)" if group.unfinished else ")")
            colour = colours.setdefault(group.label, palette[len(colours) % len(palette)])
            if group.mean is not None:
                ax.plot(group.mean.index, group.mean.values, label=label, color=colour)
                ax.fill_between(group.mean.index, (group.mean - group.std).values,
                                (group.mean + group.std).values, color=colour, alpha=0.2)
                drawn.append((group.mean, colour))
            for i, curve in enumerate(group.unfinished):
                ax.plot(curve.index, curve.values, linestyle="--", linewidth=0.9, alpha=0.8, color=colour,
                        label=label if group.mean is None and i == 0 else None)
        ax.set_xlabel(x)
        if x == "round":
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_ylabel("test accuracy" if metric == "test_acc" else metric)
        ax.grid(alpha=0.3)
        box = zoom([m for m, _ in drawn]) if drawn else None
        if box:  # below the curves when they end high (accuracy), above them when they end low (a loss)
            ends_high = box[3] > (ax.get_ylim()[0] + ax.get_ylim()[1]) / 2
            inset = ax.inset_axes([0.4, 0.1 if ends_high else 0.45, 0.55, 0.45])
            for mean, colour in drawn:
                inset.plot(mean.index, mean.values, color=colour, linewidth=1)
            inset.set_xlim(*box[:2])
            inset.set_ylim(*box[2:])
            inset.tick_params(labelsize=7)
            inset.grid(alpha=0.3)
            inset.set_title("second half, magnified", fontsize=7)
        if ax.has_data():
            ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.13), ncol=2)
    fig.suptitle(textwrap.fill(title, 110 * len(metrics)), fontsize=9)
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    from fedrun.rundir.sweeps import planned_grid, sweep_progress

    parser = argparse.ArgumentParser(prog="fedrun-report", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("paths", nargs="+", help="run directories or directories that contain them (sweeps)")
    parser.add_argument("--by", default=None, help="comma-separated config keys to group by (default: the keys "
                                                    "that vary across the runs, except the seed)")
    parser.add_argument("--out", default=None, help="write report.md, report.csv and curves.png into this folder")
    args = parser.parse_args(argv)
    try:
        runs = find_runs(args.paths)
    except FileNotFoundError as e:
        print(f"fedrun-report: {e}", file=sys.stderr)
        return 2
    if not runs:
        print(f"fedrun-report: no run directories (with {CONFIG_FILE}) under {args.paths}", file=sys.stderr)
        return 2
    df = load_runs(runs)
    by = [k.strip() for k in args.by.split(",")] if args.by else varying_keys(df)
    unknown = [k for k in by if k not in df.columns]
    if unknown:
        print(f"fedrun-report: --by keys {unknown} are not in the runs' configs; e.g. {sorted(df.columns)[:12]}",
              file=sys.stderr)
        return 2
    table = summarize(df, by)
    text = markdown(table) + unfinished(df)
    print(f"{len(runs)} runs, grouped by {by or 'nothing'}\n")
    for path in args.paths:  # a sweep's folder: how far it is
        if (Path(path) / "multirun.yaml").exists():
            print(f"{path}: {sweep_progress(Path(path), planned_grid(path))}\n")
    print(text)
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "report.md").write_text(f"{len(runs)} runs from {', '.join(args.paths)}\n\n{text}\n")
        table.to_csv(out / "report.csv", index=False)
        dashed = "; unfinished runs dashed" if (~df["status"].isin(COMPLETE)).any() else ""
        plot_curves(df, by, out / "curves.png", f"{', '.join(args.paths)}: mean test accuracy (±1 std over seeds) "
                    f"of the complete runs{dashed}")
        print(f"\nwrote {out / 'report.md'}, {out / 'report.csv'}, {out / 'curves.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
