"""The paper's claims of an artefact (paper/<paper>.yaml ``claims:``), checked on fedrun's runs: each is a comparison
of grid points (DGT against its base, GIFT against AFL and AdaComm) at every point of the artefact's other grid keys,
so that a table says beside its numbers whether the effect the paper reports appears. Rows on fixture data are not
checked: a few rounds on a stand-in say nothing of the paper's effects.

A claim pre-registered with the paper's ``effect`` is decided by the rule written before its runs
(:func:`paired_verdict`): the differences of the two sides' runs paired by seed, their mean and its 95% bootstrap
interval; it holds when the interval excludes 0 in the claimed direction and the mean reaches ``share`` (a half, by
default) of the paper's effect, and is not decided with fewer than ``seeds`` pairs. Other claims compare the means
over seeds, with ``margin``.
"""

from __future__ import annotations

import ast
import math
from pathlib import Path

import numpy as np
import pandas as pd

from fedrun.papers.artefacts import PRESET, Claim

HOLDS, FAILS = "holds", "does not hold"
UNDECIDED = "not decided"
COLUMNS = ["says", "where", "value", "method", "versus", "verdict", "pairs", "difference", "interval", "needs", "tuned"]
RESAMPLES = 10_000  # bootstrap resamples of the mean paired difference (seeded: the same runs, the same interval)


def paired_verdict(claim: Claim, method: dict[int, float], versus: dict[int, float], missing: dict[int, str],
                   effect: float) -> dict:
    """The pre-registered rule on one comparison: ``method`` and ``versus`` map a seed to its run's value (finished or
    diverged runs), ``missing`` a seed to why a side has no value there (failed, interrupted, not run), ``effect`` is
    the paper's there. Returns the verdict, the pairs, the mean difference in the claimed direction and its 95%
    bootstrap interval."""
    out = paired_difference(claim, method, versus) | {"needs": claim.share * effect}
    if out["pairs"] < claim.seeds:
        why = "; ".join(f"seed {s}: {missing[s]}" for s in sorted(missing))
        out["verdict"] = f"{UNDECIDED}: {out['pairs']} of the {claim.seeds} seed pairs it needs" + (f" ({why})" if why
                                                                                                 else "")
        return out
    holds = out["interval"][0] > 0 and out["difference"] >= out["needs"]
    out["verdict"] = HOLDS if holds else FAILS
    return out


def paired_difference(claim: Claim, method: dict[int, float], versus: dict[int, float]) -> dict:
    """The seeds both sides have, their mean difference in the claimed direction and its 95% bootstrap interval."""
    seeds = sorted(set(method) & set(versus))
    d = np.array([method[s] - versus[s] for s in seeds], dtype=float) * (1 if claim.better == "higher" else -1)
    out = {"pairs": len(seeds), "difference": float(d.mean()) if len(d) else math.nan,
           "interval": (math.nan, math.nan)}
    if len(seeds) >= 2:
        draws = np.random.default_rng(0).integers(0, len(d), size=(RESAMPLES, len(d)))
        out["interval"] = tuple(float(x) for x in np.percentile(d[draws].mean(axis=1), [2.5, 97.5]))
    return out


def _paired(claim: Claim, where: dict, runs: pd.DataFrame, best: dict[str, str]) -> dict:
    """The runs of the two sides at ``where`` (one value each; at its ``best`` value of the tuned key, where the
    claim is tuned), by seed, for :func:`paired_verdict`."""
    here = runs
    for k, v in where.items():
        here = here[here[k].astype(str) == str(v)] if k in here else here
    sides, missing = {}, {}
    for name, value in (("method", claim.method[0]), ("versus", claim.versus[0])):
        side = here[here[claim.key].astype(str) == value] if claim.key in here else here.iloc[:0]
        if value in best:
            side = side[side[claim.tuned].astype(str) == best[value]]
        done = side[side["status"].isin(("finished", "diverged")) & side[claim.value].notna()]
        sides[name] = {int(s): float(x) for s, x in zip(done["seed"], done[claim.value])}
        for _, r in side[~side.index.isin(done.index)].iterrows():
            missing[int(r["seed"])] = f"{name} {r['status']}"
    for s in set(sides["method"]) ^ set(sides["versus"]):
        missing.setdefault(s, "method not run" if s not in sides["method"] else "versus not run")
    effect = claim.paper_effect(where)
    at = ", ".join(f"{k}={v}" for k, v in where.items())
    if effect is None or effect <= 0:  # no margin to decide by: the paired difference is reported, not decided
        why = f"the paper states no effect at {at}" if effect is None else \
            f"the paper's own numbers show no gain at {at} ({effect:+.4g})"
        reported = paired_difference(claim, sides["method"], sides["versus"])
        return (reported | {"needs": math.nan} if reported["pairs"] else {}) | {"verdict": f"not checked: {why}"}
    return paired_verdict(claim, sides["method"], sides["versus"], missing, effect)


def check(claims: tuple[Claim, ...], table: pd.DataFrame, keys: list[str], reaching: frozenset[str] = frozenset(),
          runs: pd.DataFrame | None = None, not_run: dict[str, str] | None = None,
          not_checked: tuple[tuple[tuple[tuple[str, str], ...], str], ...] = ()) -> pd.DataFrame:
    """One row per claim and point of the other grid keys: the method's and the rival's means and the verdict.
    ``table`` is table_summary.summarise's (one row per grid point), ``keys`` its grid keys; ``reaching`` names the
    values that count the time to a level (papers.Value.reaching), where a missing value means never reached;
    ``runs`` (table_summary.collect's, one row per run) decides the pre-registered claims. A preset without any
    finished run is one point "not checked", with why where ``not_run`` (the artefact's) says it; so is a point that
    ``not_checked`` (the artefact's: its grid values, why) names."""
    rows = []
    ran = table[pd.to_numeric(table.get("runs"), errors="coerce").fillna(0) > 0] if "runs" in table else table
    idle = [p for p in dict.fromkeys(table[PRESET].dropna()) if p not in set(ran[PRESET])] if PRESET in table else []
    for claim in claims:
        rows += [_row(claim, {PRESET: p}, None, None, f"not checked: {(not_run or {}).get(p, 'no finished run')}")
                 for p in idle]
        if claim.key not in ran:
            rows.append(_row(claim, {}, None, None, f"not checked: no runs sweep {claim.key}"))
            continue
        if claim.tuned and claim.tuned not in ran:
            rows.append(_row(claim, {}, None, None, f"not checked: no runs sweep {claim.tuned}, the key it is tuned "
                                                    "over"))
            continue
        compared = ran[ran[claim.key].astype(str).isin(claim.method + claim.versus)]
        pooled = {claim.key, *claim.across, claim.tuned}
        others = [k for k in keys if k not in pooled and k in compared and compared[k].astype(str).nunique() > 1]
        groups = compared.groupby(others, dropna=False, sort=False) if others else [((), compared)]
        for where, group in groups:
            where = dict(zip(others, where if isinstance(where, tuple) else (where,)))
            best = _best(claim, group, claim.value in reaching) if claim.tuned else {}
            if best:
                at_best = group[claim.key].astype(str).map(best)
                group = group[at_best.isna() | (group[claim.tuned].astype(str) == at_best)]
            # the point in full: the grid keys all its rows share too (a table of one preset), which the paper's
            # effect may differ by and a verdict names
            same = {k: group[k].iloc[0] for k in keys if k in group and k not in pooled and k not in where
                    and group[k].astype(str).nunique() == 1}
            skipped = next((why for at, why in not_checked if all(str((where | same).get(k)) == v for k, v in at)),
                           None)
            if skipped:
                rows.append(_row(claim, where, None, None, f"not checked: {skipped}"))
                continue
            row = _verdict(claim, where, group, claim.value in reaching)
            row["tuned"] = _tuned(claim, best, compared[claim.tuned]) if best else ""
            # paired where both sides have finished runs: a side without any has no point to read the paper's
            # effect at, and says so above
            if claim.preregistered and runs is not None and not row["verdict"].startswith(
                    ("not checked: fixture", "not checked: no finished run")):
                row |= _paired(claim, where | same, runs, best) | {"where": where | same}
            rows.append(row)
    return pd.DataFrame(rows, columns=COLUMNS)


def _tuned(claim: Claim, best: dict[str, str], grid: pd.Series) -> str:
    """The values each side was tuned to, a value at either end of the grid marked: the best may lie beyond it."""
    values = pd.to_numeric(grid.astype(str), errors="coerce")
    ends = {str(v) for v, x in zip(grid.astype(str), values) if x in (values.min(), values.max())} \
        if values.notna().all() else set()
    return f"{claim.tuned}: " + ", ".join(f"{k} {v}" + (" (the grid's end)" if v in ends else "")
                                         for k, v in best.items())


def _best(claim: Claim, group: pd.DataFrame, reaching: bool) -> dict[str, str]:
    """Each side's value of the tuned key with the best mean over seeds at this point (a side without any value is
    left out: its verdict says so). A time to a level never reached counts as the worst."""
    best = {}
    for value in (*claim.method, *claim.versus):
        side = group[group[claim.key].astype(str) == value]
        scores = pd.to_numeric(side[claim.value], errors="coerce")
        if reaching:
            scores = scores.fillna(math.inf if claim.better == "lower" else -math.inf)
        if scores.notna().any():
            at = scores.idxmin() if claim.better == "lower" else scores.idxmax()
            best[value] = str(side.loc[at, claim.tuned])
    return best


def _verdict(claim: Claim, where: dict, group: pd.DataFrame, reaching: bool) -> dict:
    side = {name: {str(k): v for k, v in zip(group[claim.key].astype(str), group[claim.value])
                   if str(k) in values} for name, values in (("method", claim.method), ("versus", claim.versus))}
    if (group.get("fixture", pd.Series(dtype=str)).fillna("") != "").any():
        return _row(claim, where, side["method"], side["versus"], "not checked: fixture data")
    absent = [v for v in (*claim.method, *claim.versus) if v not in {**side["method"], **side["versus"]}]
    if absent:
        return _row(claim, where, side["method"], side["versus"], f"not checked: no finished run of {absent}")
    values = [*side["method"].values(), *side["versus"].values()]
    if all(pd.isna(x) for x in values) or (not reaching and any(pd.isna(x) for x in values)):
        missing = [k for k, x in {**side["method"], **side["versus"]}.items() if pd.isna(x)]
        return _row(claim, where, side["method"], side["versus"], f"not checked: no value for {missing}")
    worst = math.inf if claim.better == "lower" else -math.inf  # never reached (a time to target): the worst value
    m = [worst if pd.isna(x) else float(x) for x in side["method"].values()]
    v = [worst if pd.isna(x) else float(x) for x in side["versus"].values()]
    holds = min(m) > max(v) + claim.margin if claim.better == "higher" else max(m) < min(v) - claim.margin
    return _row(claim, where, side["method"], side["versus"], HOLDS if holds else FAILS)


def _row(claim: Claim, where: dict, method, versus, verdict: str) -> dict:
    return {"says": claim.says, "where": where, "value": claim.value, "method": method or {}, "versus": versus or {},
            "verdict": verdict}


def markdown(checked: pd.DataFrame) -> str:
    """The checks as a list under the table: the claim, where, the compared means, the verdict."""
    if checked.empty:
        return ""
    lines = ["\n## The paper's claims, checked on these runs (mean over seeds; pre-registered ones paired by seed)\n"]
    for _, r in checked.iterrows():
        where = ", ".join(f"{k}={v}" for k, v in r["where"].items())
        means = "; ".join(f"{k}: {_fmt(x)}" for k, x in {**r["method"], **r["versus"]}.items())
        compared = f" {means} ({r['value']})" if means else ""
        paired = ""
        if not pd.isna(r.get("pairs")):
            lo, hi = r["interval"]
            rule = f"needs > 0 and >= {_fmt(r['needs'])}" if not pd.isna(r.get("needs")) else "reported, not decided"
            paired = (f"; paired difference {_fmt(r['difference'])} (95% CI {_fmt(lo)} to {_fmt(hi)}, "
                      f"{int(r['pairs'])} seeds; {rule})")
        tuned = f"; each at its best {r['tuned']}" if isinstance(r.get("tuned"), str) and r["tuned"] else ""
        lines.append(f"- {r['says']}{f' ({where})' if where else ''}:{compared}{tuned}{paired} -> **{r['verdict']}**")
    return "\n".join(lines)


def _fmt(v) -> str:
    return "–" if pd.isna(v) else f"{v:.4g}"


def read(path: Path) -> pd.DataFrame:
    """A verdict file (``<artefact>_claims.csv``, written by ``fedrun-table`` beside its table) as :func:`check` made
    it: ``where``, ``method`` and ``versus`` as dicts, ``interval`` as (low, high), NaN where pairs are missing."""
    df = pd.read_csv(path, dtype={"says": str, "value": str, "verdict": str, "tuned": str}).reindex(columns=COLUMNS)
    for col in ("where", "method", "versus"):
        df[col] = [ast.literal_eval(v) if isinstance(v, str) else {} for v in df[col]]
    df["interval"] = [tuple(float(x) for x in v.strip("()").split(",")) if isinstance(v, str) else (math.nan,) * 2
                      for v in df["interval"]]
    return df


def where_cell(r) -> str:
    """A verdict row's point, ``algo=fedavg, preset=x``, and the values of a tuned key each side was compared at."""
    where = ", ".join(f"{k}={v}" for k, v in r["where"].items())
    return where + (f"; each at its best {r['tuned']}" if isinstance(r["tuned"], str) and r["tuned"] else "")


def paired_cell(r) -> str:
    """A verdict row's seed-paired difference, ``+0.05 (+0.01 to +0.09), 5 seeds``; empty for a claim on the means."""
    if pd.isna(r.get("pairs")):
        return ""
    lo, hi = r["interval"]
    measured = "-" if pd.isna(lo) else f"{r['difference']:+.2f} ({lo:+.2f} to {hi:+.2f})"
    return f"{measured}, {int(r['pairs'])} seeds"


def needs_cell(r) -> str:
    """What a verdict row's mean paired difference must reach, or that the paper states no effect to reach there."""
    if pd.isna(r.get("pairs")):
        return ""
    return "reported, not decided" if pd.isna(r.get("needs")) else f">= {r['needs']:.2f}"
