"""The paper's claims of an artefact (paper/<paper>.yaml ``claims:``), checked on fedrun's runs: each is a comparison
of grid points (DGT against its base, GIFT against AFL and AdaComm), made on the mean over seeds at every point of
the artefact's other grid keys, so that a table says beside its numbers whether the effect the paper reports
appears. Rows on fixture data are not checked: a few rounds on a stand-in say nothing of the paper's effects.
"""

from __future__ import annotations

import math

import pandas as pd

from fedrun.papers.artefacts import Claim

HOLDS, FAILS = "holds", "does not hold"


def check(claims: tuple[Claim, ...], table: pd.DataFrame, keys: list[str], reaching: frozenset[str] = frozenset()
          ) -> pd.DataFrame:
    """One row per claim and point of the other grid keys: the method's and the rival's means and the verdict.
    ``table`` is table_summary.summarise's (one row per grid point), ``keys`` its grid keys; ``reaching`` names the
    values that count the time to a level (papers.Value.reaching), where a missing value means never reached."""
    rows = []
    ran = table[pd.to_numeric(table.get("runs"), errors="coerce").fillna(0) > 0] if "runs" in table else table
    for claim in claims:
        if claim.key not in ran:
            rows.append(_row(claim, {}, None, None, f"not checked: no runs sweep {claim.key}"))
            continue
        compared = ran[ran[claim.key].astype(str).isin(claim.method + claim.versus)]
        others = [k for k in keys if k != claim.key and k not in claim.across and k in compared
                  and compared[k].astype(str).nunique() > 1]
        groups = compared.groupby(others, dropna=False, sort=False) if others else [((), compared)]
        for where, group in groups:
            where = dict(zip(others, where if isinstance(where, tuple) else (where,)))
            rows.append(_verdict(claim, where, group, claim.value in reaching))
    return pd.DataFrame(rows, columns=["says", "where", "value", "method", "versus", "verdict"])


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
    lines = ["\n## The paper's claims, checked on these runs (mean over seeds)\n"]
    for _, r in checked.iterrows():
        where = ", ".join(f"{k}={v}" for k, v in r["where"].items())
        means = "; ".join(f"{k}: {_fmt(x)}" for k, x in {**r["method"], **r["versus"]}.items())
        compared = f" {means} ({r['value']})" if means else ""
        lines.append(f"- {r['says']}{f' ({where})' if where else ''}:{compared} -> **{r['verdict']}**")
    return "\n".join(lines)


def _fmt(v) -> str:
    return "–" if pd.isna(v) else f"{v:.4g}"
