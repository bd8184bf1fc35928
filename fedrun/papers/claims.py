"""The paper's claims of an artefact (paper/<paper>.yaml ``claims:``), checked on fedrun's runs: each is a comparison
of grid points (DGT against its base, GIFT against AFL and AdaComm) at every point of the artefact's other grid keys,
so that a table says beside its numbers whether the effect the paper reports appears. Rows on fixture data are not
checked: a few rounds on a stand-in say nothing of the paper's effects.

A claim pre-registered with the paper's ``effect`` is decided by the rule written before its runs
(:func:`paired_verdict`): the differences of the two sides' runs paired by seed, their mean and its Student-t 95%
interval (its lower end is the one-sided test at 2.5%: a percentile bootstrap over 5 pairs covers far less than 95%);
it holds when the interval excludes 0 in the claimed direction and the mean reaches ``share`` (a half, by default) of
the paper's effect, and is not decided with fewer than ``seeds`` pairs. Beside the t-test, the exact sign-flip
permutation test's p-value is reported, not used: over n pairs it cannot go below 2^-n, so it cannot decide at 5 pairs
or fewer. A claim checked at several points is one family: its points' t-tests are corrected by Holm's step-down
method (:func:`holm`), so that no claim holds on one of four points where each point alone had a 2.5% chance of a
false "holds". Each decided row carries the power the rule had at that point (:func:`power`). Other claims compare
the means over seeds, with ``margin``.
"""

from __future__ import annotations

import ast
import math
from pathlib import Path

import numpy as np
import pandas as pd

from fedrun.papers.artefacts import CONFIRMATORY_FROM, PRESET, Claim

HOLDS, FAILS = "holds", "does not hold"
UNDECIDED = "not decided"
COLUMNS = ["says", "where", "value", "method", "versus", "verdict", "pairs", "difference", "interval", "needs", "tuned",
           "p", "p_sign", "power", "rule", "substitute"]
ALPHA = 0.025  # one-sided: the lower end of a two-sided 95% interval
RULE = "student-t, holm"  # the rule a verdict file's rows were decided by (files without the column: the bootstrap)
POWER_DRAWS = 20_000  # simulated data sets behind a power figure (seeded: the same runs, the same figure)


def paired_verdict(claim: Claim, method: dict[int, float], versus: dict[int, float], missing: dict[int, str],
                   effect: float) -> dict:
    """The pre-registered rule on one comparison: ``method`` and ``versus`` map a seed to its run's value (finished or
    diverged runs), ``missing`` a seed to why a side has no value there (failed, interrupted, not run), ``effect`` is
    the paper's there. Returns the verdict at this point alone (:func:`holm` corrects it over the claim's points), the
    pairs, the mean difference in the claimed direction, its Student-t 95% interval, the one-sided p-values of the
    t-test (which decides) and the sign-flip test (reported), and the rule's power at the paper's effect."""
    out = paired_difference(claim, method, versus) | {"needs": claim.share * effect}
    if out["pairs"] < claim.seeds:
        why = "; ".join(f"seed {s}: {missing[s]}" for s in sorted(missing))
        out["verdict"] = f"{UNDECIDED}: {out['pairs']} of the {claim.seeds} seed pairs it needs" + (f" ({why})" if why
                                                                                                 else "")
        return out
    holds = out["p"] <= ALPHA and out["difference"] >= out["needs"]
    out["verdict"] = HOLDS if holds else FAILS
    out["power"] = power(out["pairs"], effect, out["sd"], out["needs"])
    return out


def paired_difference(claim: Claim, method: dict[int, float], versus: dict[int, float]) -> dict:
    """The seeds both sides have, their mean difference in the claimed direction, its Student-t 95% interval, the
    spread of the differences and the one-sided p-values of the t-test and of the exact sign-flip test."""
    seeds = sorted(set(method) & set(versus))
    d = np.array([method[s] - versus[s] for s in seeds], dtype=float) * (1 if claim.better == "higher" else -1)
    out = {"pairs": len(seeds), "difference": float(d.mean()) if len(d) else math.nan,
           "interval": (math.nan, math.nan), "p": math.nan, "p_sign": math.nan, "sd": math.nan, "rule": RULE}
    if len(seeds) >= 2:
        low, high, p = t_test(d)
        out |= {"interval": (float(low), float(high)), "p": float(p), "sd": float(d.std(ddof=1)),
                "p_sign": sign_flip_p(d)}
    return out


def t_test(d: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Over the last axis of ``d`` (paired differences, n >= 2 a row): the Student-t 95% interval of the mean and the
    one-sided p-value of "the mean is above 0". Differences that do not vary give the interval (mean, mean) and a p of
    0 where the mean is above 0, else 1."""
    from scipy import stats

    n = d.shape[-1]
    mean, sd = d.mean(axis=-1), d.std(axis=-1, ddof=1)
    half = stats.t.ppf(1 - ALPHA, n - 1) * sd / math.sqrt(n)
    with np.errstate(divide="ignore", invalid="ignore"):
        p = np.where(sd > 0, stats.t.sf(mean / (sd / math.sqrt(n)), n - 1), np.where(mean > 0, 0.0, 1.0))
    return mean - half, mean + half, p


def sign_flip_p(d: np.ndarray) -> float:
    """The exact one-sided p-value of the sign-flip permutation test of "the mean difference is above 0" (every one
    of the 2^n sign patterns; scipy's permutation_test): valid without normality, at least 2^-n."""
    from scipy import stats

    return float(stats.permutation_test((d,), np.mean, permutation_type="samples", alternative="greater",
                                        n_resamples=np.inf).pvalue)


def holds_by_rule(d: np.ndarray, needs: float) -> np.ndarray:
    """The rule at one point, over the last axis of ``d``: the t-test's one-sided p at most ALPHA and the mean at
    least ``needs``."""
    return (t_test(d)[2] <= ALPHA) & (d.mean(axis=-1) >= needs)


def power(pairs: int, effect: float, sd: float, needs: float, draws: int = POWER_DRAWS) -> float:
    """The chance that the rule (:func:`holds_by_rule`) decides "holds" at a point of ``pairs`` seed pairs when the
    true mean difference is the paper's ``effect`` and the differences are normal with the spread ``sd`` seen there
    (simulated, seeded); nan where the spread is not known."""
    if not (pairs >= 2 and math.isfinite(sd) and math.isfinite(effect)):
        return math.nan
    if sd == 0:
        return float(effect > 0 and effect >= needs)
    d = np.random.default_rng(0).normal(effect, sd, size=(draws, pairs))
    return float(holds_by_rule(d, needs).mean())


def holm(rows: list[dict]) -> list[dict]:
    """One claim's decided points as a family: Holm's step-down correction of their t-tests (the smallest p against
    ALPHA / m, the next against ALPHA / (m - 1), ..., stopping at the first that fails). A point whose own test passed
    but the family's did not is said so; the others are as :func:`paired_verdict` decided them."""
    decided = sorted((i for i, r in enumerate(rows) if r.get("verdict") in (HOLDS, FAILS) and
                      math.isfinite(r.get("p", math.nan))), key=lambda i: rows[i]["p"])
    m, passing = len(decided), True
    out = [dict(r) for r in rows]
    for rank, i in enumerate(decided):
        passing = passing and out[i]["p"] <= ALPHA / (m - rank)
        if out[i]["verdict"] == HOLDS and not passing:
            out[i]["verdict"] = (f"{FAILS}: its t-test passes alone, not after Holm's correction over the claim's "
                                 f"{m} points (p = {out[i]['p']:.3g})")
    return out


def _paired(claim: Claim, where: dict, runs: pd.DataFrame, best: dict[str, str], stands_for: str = "") -> dict:
    """The runs of the two sides at ``where`` (one value each; at its ``best`` value of the tuned key, where the
    claim is tuned), by seed, for :func:`paired_verdict`; at a point on a substitute dataset (``stands_for``: the
    paper's preset it stands in for) decided against the paper's effect there."""
    here = _at(runs, where)
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
    if effect is None and stands_for:
        effect = claim.paper_effect(where | {PRESET: stands_for})
    at = ", ".join(f"{k}={v}" for k, v in where.items())
    if effect is None or effect <= 0:  # no margin to decide by: the paired difference is reported, not decided
        why = f"the paper states no effect at {at}" if effect is None else \
            f"the paper's own numbers show no gain at {at} ({effect:+.4g})"
        reported = paired_difference(claim, sides["method"], sides["versus"])
        return (reported | {"needs": math.nan} if reported["pairs"] else {}) | {"verdict": f"not checked: {why}"}
    return paired_verdict(claim, sides["method"], sides["versus"], missing, effect)


def _at(runs: pd.DataFrame, where: dict) -> pd.DataFrame:
    """The runs at a point (``where``: grid values; a key the runs do not have is no filter)."""
    for k, v in where.items():
        runs = runs[runs[k].astype(str) == str(v)] if k in runs else runs
    return runs


def split_seeds(runs: pd.DataFrame | None) -> tuple[pd.DataFrame | None, pd.DataFrame | None]:
    """The runs that decide the pre-registered claims and those a tuned claim picks its values on: where the runs
    hold the confirmatory block's seeds (fedrun-table --confirm), those seeds alone, and the seeds below it; else all
    runs, and no separate tuning runs (a tuned claim picks on the means over all seeds)."""
    if runs is None or "seed" not in runs:
        return runs, None
    block = pd.to_numeric(runs["seed"]) >= CONFIRMATORY_FROM
    return (runs[block], runs[~block]) if block.any() else (runs, None)


def _tuning(claim: Claim, runs: pd.DataFrame, where: dict) -> pd.DataFrame:
    """A tuned claim's tuning table at a point: the mean of its value over the complete tuning ``runs`` there, for
    each side's value and each value of the tuned key (what :func:`_best` reads)."""
    here = _at(runs, where)
    here = here[here["status"].isin(("finished", "diverged"))]
    return here.groupby([claim.key, claim.tuned], dropna=False)[claim.value].mean().reset_index()


def check(claims: tuple[Claim, ...], table: pd.DataFrame, keys: list[str], reaching: frozenset[str] = frozenset(),
          runs: pd.DataFrame | None = None, not_run: dict[str, str] | None = None,
          not_checked: tuple[tuple[tuple[tuple[str, str], ...], str], ...] = (),
          substitutes: dict[str, str] | None = None) -> pd.DataFrame:
    """One row per claim and point of the other grid keys: the method's and the rival's means and the verdict.
    ``table`` is table_summary.summarise's (one row per grid point), ``keys`` its grid keys; ``reaching`` names the
    values that count the time to a level (papers.Value.reaching), where a missing value means never reached;
    ``runs`` (table_summary.collect's, one row per run) decides the pre-registered claims. A preset without any
    finished run is one point "not checked", with why where ``not_run`` (the artefact's) says it; so is a point that
    ``not_checked`` (the artefact's: its grid values, why) names. A point of a preset that ``substitutes`` (the
    artefact's) names ran on a stand-in for the paper's dataset: it is labelled (``substitute``: the paper's preset)
    and a pre-registered claim decides it against the paper's effect there."""
    rows = []
    runs, tuning_runs = split_seeds(runs)
    ran = table[pd.to_numeric(table.get("runs"), errors="coerce").fillna(0) > 0] if "runs" in table else table
    idle = [p for p in dict.fromkeys(table[PRESET].dropna()) if p not in set(ran[PRESET])] if PRESET in table else []
    for claim in claims:
        first = len(rows)
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
            # a tuned claim's values: picked on the tuning seeds where the confirmatory ones are there to test them
            tuning = _tuning(claim, tuning_runs, where) if claim.tuned and tuning_runs is not None else group
            best = _best(claim, tuning, claim.value in reaching) if claim.tuned else {}
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
            stands_for = (substitutes or {}).get(str((where | same).get(PRESET)), "")
            row["substitute"] = stands_for
            # paired where both sides have finished runs: a side without any has no point to read the paper's
            # effect at, and says so above
            if claim.preregistered and runs is not None and not row["verdict"].startswith(
                    ("not checked: fixture", "not checked: no finished run")):
                row |= _paired(claim, where | same, runs, best, stands_for) | {"where": where | same}
            rows.append(row)
        if claim.preregistered:  # the claim's points, one family
            rows[first:] = holm(rows[first:])
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
            paired = (f"; paired difference {_fmt(r['difference'])} ({interval_name(r)} {_fmt(lo)} to {_fmt(hi)}, "
                      f"{int(r['pairs'])} seeds; {rule}{tests_said(r)})")
        tuned = f"; each at its best {r['tuned']}" if isinstance(r.get("tuned"), str) and r["tuned"] else ""
        tuned += f"; on a substitute for {r['substitute']}" if isinstance(r.get("substitute"), str) and \
            r["substitute"] else ""
        lines.append(f"- {r['says']}{f' ({where})' if where else ''}:{compared}{tuned}{paired} -> **{r['verdict']}**")
    return "\n".join(lines)


def interval_name(r) -> str:
    """What a verdict row's interval is: the Student-t one, or, in a file decided before it replaced it, the
    percentile bootstrap's (too narrow at 5 pairs)."""
    return "95% t-interval" if r.get("rule") == RULE else "95% bootstrap interval, superseded"


def tests_said(r) -> str:
    """A decided row's one-sided p-values (the t-test decides; the sign-flip test is reported) and its power at the
    paper's effect; empty for a row decided by the bootstrap, which had none."""
    if r.get("rule") != RULE or pd.isna(r.get("p")):
        return ""
    said = f"; one-sided p {r['p']:.3g} (t-test, decides), {r['p_sign']:.3g} (sign-flip)"
    return said + (f"; power at the paper's effect {r['power']:.0%}" if not pd.isna(r.get("power")) else "")


def _fmt(v) -> str:
    return "–" if pd.isna(v) else f"{v:.4g}"


def read(path: Path) -> pd.DataFrame:
    """A verdict file (``<artefact>_claims.csv``, written by ``fedrun-table`` beside its table) as :func:`check` made
    it: ``where``, ``method`` and ``versus`` as dicts, ``interval`` as (low, high), NaN where pairs are missing."""
    df = pd.read_csv(path, dtype={"says": str, "value": str, "verdict": str, "tuned": str, "rule": str,
                                  "substitute": str}
                     ).reindex(columns=COLUMNS)
    for col in ("where", "method", "versus"):
        df[col] = [ast.literal_eval(v) if isinstance(v, str) else {} for v in df[col]]
    df["interval"] = [tuple(float(x) for x in v.strip("()").split(",")) if isinstance(v, str) else (math.nan,) * 2
                      for v in df["interval"]]
    return df


def where_cell(r) -> str:
    """A verdict row's point, ``algo=fedavg, preset=x``, and the values of a tuned key each side was compared at."""
    where = ", ".join(f"{k}={v}" for k, v in r["where"].items())
    where += f"; each at its best {r['tuned']}" if isinstance(r["tuned"], str) and r["tuned"] else ""
    return where + (f"; on a substitute for {r['substitute']}" if isinstance(r.get("substitute"), str)
                    and r["substitute"] else "")


def paired_cell(r) -> str:
    """A verdict row's seed-paired difference, ``+0.05 (+0.01 to +0.09), 5 seeds``; empty for a claim on the means."""
    if pd.isna(r.get("pairs")):
        return ""
    lo, hi = r["interval"]
    measured = "-" if pd.isna(lo) else f"{r['difference']:+.2f} ({lo:+.2f} to {hi:+.2f})"
    return f"{measured}, {int(r['pairs'])} seeds" + ("" if r.get("rule") == RULE else " (bootstrap, superseded)")


def needs_cell(r) -> str:
    """What a verdict row's mean paired difference must reach, or that the paper states no effect to reach there."""
    if pd.isna(r.get("pairs")):
        return ""
    return "reported, not decided" if pd.isna(r.get("needs")) else f">= {r['needs']:.2f}"
