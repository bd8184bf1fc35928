"""results/CLAIMS.md: every claim of the five papers (``paper/*.yaml``), one line each: its verdict in a word, its
points' verdicts counted, its artefact, its rule (pre-registered: seed-paired with the paper's effect; else the means
over seeds), the datasets its runs need and whether they are on this machine (docs/data.md says how to get each).
And each paper's ``results/<paper>/claims.md``: every claim at every point of its artefact's table, with its rule,
the means compared, the seed-paired difference and its 95% interval, what the rule needs, the verdict, and the runs'
commit, compute time and machine.

    python scripts/repo/claims_index.py [--out results/CLAIMS.md] [--results results]

The verdicts are counted from each artefact's committed table (``fedrun-table <artefact>`` writes
``results/<paper>/<artefact>_claims.csv`` beside it, one row per claim and point): how many points hold, do not hold,
are not decided (too few seed pairs) or not checked, with why; an artefact without such a table is "no verdict yet",
or "not testable here" with its ``not_run`` reasons where none of its presets can run on these machines.
"""

from __future__ import annotations

import argparse
import functools
import math
import re
import subprocess
import sys
import textwrap
import time
from collections import Counter
from pathlib import Path

import pandas as pd

from fedrun.data import DATASETS
from fedrun.data.base import default_root
from fedrun.papers import claims as checks
from fedrun.papers.artefacts import Artefact, Claim, Paper, outline, papers
from fedrun.papers.table_summary import read_provenance
from fedrun.rundir.progress import duration
from fedrun.rundir.files import git_commit

REPO = Path(__file__).resolve().parents[2]


def rule(claim: Claim) -> str:
    if not claim.preregistered:
        return "means over seeds" + (f", margin {claim.margin:g}" if claim.margin else "")
    if claim.effects:
        effect = f"the paper's effect at each of {len(claim.effects)} points"
    else:
        effect = f"the effect registered for it ({claim.effect:g})"
    tuned = f", each side at its best {claim.tuned}" if claim.tuned else ""
    return (f"pre-registered: {claim.seeds} seed pairs{tuned}, Student-t 95% interval > 0 (Holm over its points) and "
            f"mean >= {claim.share:g} x {effect}")


def untestable(artefact: Artefact) -> list[str]:
    """Why none of the artefact's presets can run here (its ``not_run`` reasons), or none where one of them may."""
    if artefact.presets and set(artefact.presets) <= set(artefact.not_run):
        return sorted({artefact.not_run[p] for p in artefact.presets})
    return []


def verdicts(checked: pd.DataFrame | None, claim: Claim, why_untestable: list[str] = (), say=str) -> str:
    """The claim's verdicts over its artefact's points, counted, the decided first: ``holds at 1 of 4 points; does
    not hold at 3; not checked at 8 (fixture data)``; without a table "not testable here" with ``why_untestable``
    (:func:`untestable`) where there is such a reason, else "no verdict yet". ``say`` writes each reason
    (``Notes.cite``: a long one as a note's number)."""
    if checked is None:
        if why_untestable:
            return f"not testable here ({', '.join(say(r) for r in why_untestable)})"
        return "no verdict yet (no table with verdicts in results/)"
    mine = checked[checked["says"] == claim.says]
    if mine.empty:
        return "no verdict yet (the table predates the claim)"
    kinds = Counter(v.split(":", 1)[0] for v in mine["verdict"])
    # a point's own detail (which seeds are missing, the paper's number) is dropped, so that like reasons count once
    why = {k: sorted({re.sub(r" \([^()]*\)$", "", v.split(":", 1)[1].strip()) for v in mine["verdict"]
                      if v.startswith(k + ":")}) for k in kinds}
    order = ("holds", "does not hold", "not decided", "not checked")  # the decided first
    parts = []
    for i, (kind, n) in enumerate(sorted(kinds.items(), key=lambda kn: order.index(kn[0]) if kn[0] in order else 9)):
        parts.append(f"{kind} at {n}" + (f" of {len(mine)} point{'s' * (len(mine) > 1)}" if i == 0 else "")
                     + (f" ({', '.join(say(r) for r in why[kind])})" if why[kind] else ""))
    on_substitutes = substitute_points(mine)
    if on_substitutes:
        parts.append(f"{len(on_substitutes)} of the decided points on substitutes ("
                     + ", ".join(f"{k} at {n}" for k, n in Counter(on_substitutes).items()) + ")")
    if superseded(mine):
        parts.append(say(SUPERSEDED))
    return "; ".join(parts)


def substitute_points(rows: pd.DataFrame) -> list[str]:
    """The verdicts of a claim's decided points that ran on a substitute dataset (their ``substitute`` column)."""
    if "substitute" not in rows:
        return []
    decided = rows["verdict"].str.split(":").str[0].isin(("holds", "does not hold"))
    return [v.split(":")[0] for v, sub in zip(rows["verdict"][decided], rows["substitute"][decided])
            if isinstance(sub, str) and sub]


SUPERSEDED = ("decided by the percentile bootstrap interval this project used before the Student-t rule (too narrow "
              "at 5 seed pairs: it covered 0 in 84% of simulated null cases, not 95%); to be re-run on fresh seeds "
              "under the current rule")


def superseded(rows: pd.DataFrame) -> bool:
    """Whether a claim's paired rows were decided by the old bootstrap rule (their file predates the rule column)."""
    paired = rows[pd.to_numeric(rows["pairs"], errors="coerce").gt(0)] if "pairs" in rows else rows.iloc[:0]
    rules = paired["rule"] if "rule" in paired else pd.Series(None, index=paired.index, dtype=object)
    return bool(len(paired)) and any(rule != checks.RULE for rule in rules)


def read_verdicts(path: Path, artefact: Artefact) -> pd.DataFrame:
    """An artefact's committed verdicts, a preset that has no runs here said not checked for the reason its
    ``not_run`` gives now (a measured cost may be newer than the table)."""
    rows = checks.read(path)
    for i, r in rows.iterrows():
        preset = r["where"].get("preset")
        if preset in artefact.not_run and r["verdict"].startswith("not checked") and pd.isna(r["pairs"]):
            rows.at[i, "verdict"] = f"not checked: {artefact.not_run[preset]}"
    return rows


def dataset_of(row, artefact: Artefact) -> str:
    """The dataset a verdict row's point ran on: its preset's, or the artefact's one dataset."""
    preset = row["where"].get("preset") if isinstance(row["where"], dict) else None
    if preset:
        return outline(preset)[1]
    return ", ".join(datasets_of(artefact))


def datasets_of(artefact) -> list[str]:
    if artefact.measure:
        return sorted(set(artefact.data))
    return sorted({outline(preset)[1] for preset in artefact.presets})  # read, not composed (tests hold them equal)


def evidence(checked: pd.DataFrame | None, claim: Claim, data_of) -> str:
    """What a decided verdict rests on: how it was decided (pre-registered and paired, or on the means over seeds
    without an interval) and the datasets of its decided points (``data_of``: a row's dataset); empty without a
    decided point."""
    if checked is None:
        return ""
    mine = checked[checked["says"] == claim.says]
    decided = mine[mine["verdict"].str.split(":").str[0].isin(("holds", "does not hold"))]
    if decided.empty:
        return ""
    how = "pre-registered, seed-paired" if claim.preregistered else "on the means over seeds, without an interval"
    return f"{how}, on {', '.join(sorted({data_of(r) for _, r in decided.iterrows()}))}"


def overall(checked: pd.DataFrame | None, claim: Claim, why_untestable: list[str] = ()) -> str:
    """The claim's verdict in a word: holds or does not hold where every decided point agrees, mixed where they
    differ; without a decided point, "reported" where a paired difference is given without a margin to decide by (the
    paper states no effect), "no verdict yet" where runs may still come, else "not testable here"."""
    if checked is None or checked[checked["says"] == claim.says].empty:
        return "not testable here" if why_untestable else "no verdict yet"
    mine = checked[checked["says"] == claim.says]
    kinds = mine["verdict"].str.split(":").str[0]
    own = ~mine["substitute"].map(lambda s: isinstance(s, str) and bool(s)) if "substitute" in mine else kinds.eq(kinds)
    # the paper's own datasets decide the word; substitutes only where none of them was decided ("on substitutes")
    decided_here = [k for k in ("holds", "does not hold") if (kinds.eq(k) & own).any()]
    decided = decided_here or [k for k in ("holds", "does not hold") if kinds.eq(k).any()]
    if decided:
        word = "mixed" if len(decided) == 2 else decided[0]
        word += "" if decided_here else " on substitutes"
        if claim.by_construction and word.startswith("holds"):  # no support: the method's own rule makes it so
            return "true by construction"
        return f"{word}{OLD_RULE}" if superseded(mine) else word
    if mine["verdict"].str.startswith(("not decided", "not checked: no finished run")).any():
        return "no verdict yet"
    if "pairs" in mine and pd.to_numeric(mine["pairs"], errors="coerce").gt(0).any():
        return "reported, not decided"
    return "not testable here"


OLD_RULE = " (bootstrap, superseded)"  # a verdict word decided by the rule before the Student-t one
TALLY = {"holds": "hold", "does not hold": "do not hold", "mixed": "hold at some points and not at others",
         "reported, not decided": "are reported, not decided (the paper states no effect to decide by)",
         "no verdict yet": "have no verdict yet", "not testable here": "are not testable here"}
TALLY["true by construction"] = "hold by construction (the method's rule makes them so; not counted as support)"
# a decided word on substitute datasets only, or by the superseded rule, is counted apart
TALLY |= {f"{word}{where}{rule}": f"{TALLY[word]}{where_said}{rule_said}"
          for word in ("holds", "does not hold", "mixed")
          for where, where_said in (("", ""), (" on substitutes", " on substitute datasets only"))
          for rule, rule_said in (("", ""), (OLD_RULE, " by the superseded bootstrap rule (to be re-run on fresh "
                                                       "seeds)"))
          if where or rule}


class Notes:
    """Long reasons (a measured cost, say) said once under the table, as numbered notes that the rows cite."""

    longest_inline = 60

    def __init__(self):
        self.numbers: dict[str, int] = {}

    def cite(self, reason: str) -> str:
        """The reason, or where it is longer than ``longest_inline`` its note's number."""
        if len(reason) <= self.longest_inline:
            return reason
        return f"note {self.numbers.setdefault(reason, len(self.numbers) + 1)}"

    def markdown(self) -> str:
        if not self.numbers:
            return ""
        return "\nNotes:\n\n" + "".join(f"{n}. {reason}\n" for reason, n in self.numbers.items())


def status(datasets: list[str], present: dict[str, bool]) -> str:
    """Whether the claim's data is on this machine: yes, partly (naming what is missing) or no."""
    missing = [d for d in datasets if not present[d]]
    if not missing:
        return "yes"
    return f"{'no' if len(missing) == len(datasets) else 'partly'}: missing {', '.join(missing)}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="results/CLAIMS.md")
    parser.add_argument("--results", default="results", help="the committed tables (results/<paper>/)")
    args = parser.parse_args(argv)
    root = default_root()
    lines, present, notes, tally = [], {}, Notes(), Counter()
    found = {key: verdict_files(paper, Path(args.results) / key) for key, paper in papers().items()}
    for key, paper in papers().items():
        for artefact in paper.artefacts.values():
            if not artefact.claims:
                continue
            checked, why_untestable = found[key].get(artefact.name), untestable(artefact)
            datasets = datasets_of(artefact)
            for d in datasets:
                present.setdefault(d, DATASETS[d].is_present(root))
            here = status(datasets, present)
            for claim in artefact.claims:
                counted = verdicts(checked, claim, why_untestable, notes.cite)
                rests = evidence(checked, claim, lambda r, a=artefact: dataset_of(r, a))
                counted += f"; {rests}" if rests else ""
                if claim.by_construction:
                    counted += f"; true by construction: {notes.cite(claim.by_construction)}"
                tally[word := overall(checked, claim, why_untestable)] += 1
                lines.append(f"| {paper.cite} | {claim.says} | **{word}** | {counted} | "
                             f"{artefact.name} ({artefact.source}) | {claim.value} | {rule(claim)} | "
                             f"{', '.join(datasets)} | {here} |")
    command = "python scripts/repo/claims_index.py " + " ".join(argv if argv is not None else sys.argv[1:])
    text = (f"# Every claim of the five papers\n\nMade by `{command.strip()}` at commit {git_commit()} on "
            f"{time.strftime('%Y-%m-%d')}, from `paper/*.yaml` and the tables in {args.results}/, with the data under "
            f"{root} at the time. The verdicts count the points of the claim's artefact table (`fedrun-table "
            "<artefact>`, results/<paper>/; its header names the runs' commit), decided by the rule "
            "(docs/papers.md#pre-registered-claims); a point on a stand-in dataset, or without finished runs, is "
            "not checked. A claim whose verdict file predates the Student-t rule was decided by a percentile "
            "bootstrap interval, too narrow at 5 seed pairs: its verdict says \"(bootstrap, superseded)\" until its "
            "artefact is run again.\n\n"
            f"Of the {len(lines)} claims, " + ", ".join(f"{tally[word]} {said}" for word, said in TALLY.items()
                                                        if tally[word]) + ".\n\n"
            "| paper | claim | verdict | points | artefact | value | rule | data | data on this machine |\n"
            "|---|---|---|---|---|---|---|---|---|\n"
            + "\n".join(lines) + "\n" + notes.markdown())
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    print(f"{len(lines)} claims -> {out}")
    for key, paper in papers().items():
        folder = Path(args.results) / key
        if any(a.claims for a in paper.artefacts.values()) and folder.is_dir():
            (folder / "claims.md").write_text(paper_page(key, paper, folder, found[key], command.strip(), out))
            print(f"{paper.cite} -> {folder / 'claims.md'}")
    return 0


def verdict_files(paper: Paper, folder: Path) -> dict[str, pd.DataFrame]:
    """The verdicts of each of the paper's artefacts with claims and a verdict file in ``folder``, by artefact."""
    return {a.name: read_verdicts(folder / f"{a.name}_claims.csv", a) for a in paper.artefacts.values()
            if a.claims and (folder / f"{a.name}_claims.csv").exists()}


def paper_page(key: str, paper: Paper, folder: Path, found: dict[str, pd.DataFrame], command: str,
               index: Path) -> str:
    """``results/<paper>/claims.md``: the paper's claims, artefact by artefact, each point of each claim checked
    (``found``: :func:`verdict_files`)."""
    explored = (" What was explored before the claims were registered (many commits, readings tried): "
                "[exploration.md](exploration.md).") if (folder / "exploration.md").exists() else ""
    parts = [f"# {paper.cite}: its claims, pre-registered and checked\n\n"
             f"Made by `{command}` at commit {git_commit()} on {time.strftime('%Y-%m-%d')}, from `paper/{key}.yaml` "
             "(each claim with its reading, comparison, seeds and rule, written before its runs) and the verdict "
             "files beside this page (`<artefact>_claims.csv`, written with each table by `fedrun-table "
             "<artefact>`). A pre-registered claim holds at a point when the Student-t 95% interval of its "
             "seed-paired difference lies above 0, after Holm's correction over the claim's points, and its mean "
             "reaches the share of the paper's effect the rule names (docs/papers.md, Pre-registered claims); a "
             "verdict file made before that rule was decided by a 95% percentile bootstrap interval, which is too "
             "narrow at 5 seed pairs, and its rows say \"bootstrap, superseded\". The others compare the means over "
             "seeds. A point on a "
             f"stand-in dataset, or without finished runs, is not checked. Every paper's claims, one line each: "
             f"[{index.name}](../{index.name}).{explored}\n"]
    if forest(paper, found, folder):
        parts.append(f"![Each seed-paired difference with its 95% interval]({FOREST})\n\n"
                     f"`{FOREST}`: each point's seed-paired difference (method minus rival, in the claimed direction) "
                     "with its 95% interval (Student-t; the bootstrap's where its file predates that rule), "
                     "coloured by verdict; a bar marks what the rule needs there "
                     "(none where the paper states no effect). A claim holds where its interval clears 0 and its "
                     "dot reaches the bar.\n")
    for artefact in paper.artefacts.values():
        if artefact.claims:
            parts.append(artefact_section(artefact, found.get(artefact.name), folder))
    return "\n".join(parts)


FOREST = "claims.png"


def unit(artefact: Artefact, name: str) -> str:
    """What a claim's value is, for an axis: ``accuracy: final_test_acc in %``."""
    value = next((v for v in artefact.values if v.name == name), None)
    if value is None:
        return name
    scaled = next((f" in {u}" for scale, u in ((100, "%"), (1 / 3600, "hours")) if math.isclose(value.scale, scale)),
                  "" if value.scale == 1 else f" x {value.scale:g}")
    return f"{name}: {value.of}{scaled}"
COLOURS = {checks.HOLDS: "tab:green", checks.FAILS: "tab:red"}  # else grey: too few pairs, or no effect to reach


def paired_points(paper: Paper, found: dict[str, pd.DataFrame]) -> list[dict]:
    """Every point of the paper's claims with a seed-paired difference (decided or reported), from its verdicts
    (:func:`verdict_files`), each with ``panel``: what its value is (:func:`unit`)."""
    return [r.to_dict() | {"panel": unit(paper.artefacts[name], r["value"])}
            for name, rows in found.items() for _, r in rows[rows["pairs"].notna()].iterrows()]


def forest(paper: Paper, found: dict[str, pd.DataFrame], folder: Path) -> bool:
    """``<folder>/claims.png``: every paired point of the paper's claims, one panel per value compared (accuracy
    points, hours), its difference and 95% interval beside what the rule needs. False (and no file) without one."""
    rows = paired_points(paper, found)
    (folder / FOREST).unlink(missing_ok=True)
    if not rows:
        return False
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = list(dict.fromkeys(r["panel"] for r in rows))
    sizes = [sum(r["panel"] == v for r in rows) for v in panels]
    fig, axes = plt.subplots(len(panels), 1, figsize=(13, 1.2 + 0.7 * sum(sizes) + 0.5 * len(panels)),
                             height_ratios=sizes, squeeze=False)
    for ax, panel in zip(axes[:, 0], panels):
        mine = [r for r in rows if r["panel"] == panel]
        for y, r in enumerate(reversed(mine)):
            lo, hi = r["interval"]
            colour = COLOURS.get(r["verdict"].split(":")[0], "tab:grey")
            ax.plot([lo, hi], [y, y], color=colour, lw=2)
            ax.plot(r["difference"], y, "o", color=colour)
            if not pd.isna(r["needs"]):
                ax.plot(r["needs"], y, "|", color="black", ms=14, mew=2)
        ax.axvline(0, color="grey", lw=0.8)
        ax.set_yticks(range(len(mine)), [textwrap.fill(f"{r['says']} ({checks.where_cell(r)})", 80)
                                         for r in reversed(mine)], fontsize=7)
        ax.set_ylim(-0.6, len(mine) - 0.4)
        ax.set_xlabel(f"paired difference (95% CI), {panel}; bar: what the rule needs", fontsize=8)
    shown = {COLOURS.get(r["verdict"].split(":")[0], "tab:grey") for r in rows}
    handles = [plt.Line2D([], [], color=c, marker="o", lw=2, label=v) for v, c in
               (*COLOURS.items(), ("not decided, or reported", "tab:grey")) if c in shown]
    axes[0, 0].legend(handles=handles, fontsize=7, loc="best")
    axes[0, 0].set_title(f"{paper.cite}: each claim's seed-paired difference", fontsize=9)
    fig.text(0.01, 0, f"python scripts/repo/claims_index.py at {git_commit()[:7]}, from the verdict files in {folder}; "
             "their runs, seeds and commits: claims.md", fontsize=6, color="grey", va="top")
    fig.savefig(folder / FOREST, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return True


@functools.cache
def registered(paper_key: str, says: str) -> str:
    """When a claim was written down: the first commit whose ``paper/<paper>.yaml`` holds its words (git's pickaxe;
    a claim reworded since counts from its rewording)."""
    found = subprocess.run(["git", "log", "--reverse", "--format=%h %as", "-S", says, "--", f"paper/{paper_key}.yaml"],
                           cwd=REPO, capture_output=True, text=True)
    first = found.stdout.split("\n", 1)[0].split() if found.returncode == 0 else []
    return f"Registered at commit {first[0]} on {first[1]}." if len(first) == 2 else "Registered: not known here."


def seed_ranges(seeds) -> str:
    """Seeds as runs of consecutive numbers: [0, 1, 2, 5] -> "0-2, 5"."""
    runs: list[list[int]] = []
    for s in sorted(set(seeds)):
        if runs and s == runs[-1][-1] + 1:
            runs[-1].append(s)
        else:
            runs.append([s])
    return ", ".join(f"{r[0]}-{r[-1]}" if len(r) > 1 else str(r[0]) for r in runs)


@functools.cache
def explored(paper_key: str, name: str, folder: Path) -> str:
    """The seeds exploration used on an artefact: those below the confirmatory block of every committed version of
    its table (git's history of ``results/<paper>/<artefact>.md``), and the searches of the paper's exploration.md in
    ``folder`` (its claims page's)."""
    from fedrun.papers.artefacts import CONFIRMATORY_FROM

    path = f"results/{paper_key}/{name}.md"
    versions = subprocess.run(["git", "log", "--format=%H", "--", path], cwd=REPO, capture_output=True, text=True)
    seen: set[int] = set()
    for commit in versions.stdout.split():
        text = subprocess.run(["git", "show", f"{commit}:{path}"], cwd=REPO, capture_output=True, text=True).stdout
        for found in re.finditer(r"over seeds \[([^\]]*)\]", text):
            seen |= {int(s) for s in found.group(1).split(",") if s.strip() and int(s) < CONFIRMATORY_FROM}
    said = (f"its committed tables (git's history of `{path}`) used seeds {seed_ranges(seen)}" if seen
            else "no committed table of it was made before")
    search = folder / "exploration.md"
    made = re.search(r"Made by `([^`]*)`", search.read_text()) if search.exists() else None
    if made:
        count = re.search(r"--(?:long-)?seeds (\d+)", made.group(1))
        said += (f"; the paper's [exploration.md](exploration.md) (`{made.group(1)}`) seeds "
                 f"{seed_ranges(range(int(count.group(1)))) if count else '0'}")
    return f"Exploration: {said}.\n"


def seeds_said(table_text: str, artefact: Artefact) -> str:
    """Whether the seeds a table's pre-registered claims were decided on are the registered confirmatory ones (the
    block no exploration may run) or seeds exploration may have seen before the claims were registered."""
    from fedrun.papers.artefacts import CONFIRMATORY_FROM, confirmatory_seeds

    found = re.search(r"over seeds \[([^\]]*)\]", table_text)
    seeds = [int(s) for s in found.group(1).split(",") if s.strip()] if found else []
    registered = confirmatory_seeds(artefact)
    if seeds and set(registered) <= set(seeds):
        tuned = sorted(set(seeds) - set(registered))
        return (f"Seeds: {registered}, the registered confirmatory ones (seeds {CONFIRMATORY_FROM} and up are refused "
                "to every exploration): unseen before the claims were decided"
                + (f"; the tuned values were picked on seeds {tuned}" if tuned else "") + ".\n")
    return (f"Seeds: {seeds or 'unknown'}, below the confirmatory block ({CONFIRMATORY_FROM} and up): exploration "
            "used the same range, so they may have been seen before the claims were registered; the claims are to be "
            f"decided again on the registered seeds {registered[0]}-{registered[-1]} (`fedrun-table {artefact.name} "
            "--confirm`).\n")


def artefact_section(artefact: Artefact, rows: pd.DataFrame | None, folder: Path) -> str:
    """One artefact's claims: their rules, where its runs come from (its table's header in ``folder``), and a row per
    claim and point of its verdicts ``rows``."""
    lines = [f"## {artefact.name}: {artefact.source}\n", f"Measured: {artefact.what}.\n" if artefact.what else ""]
    lines += [f"- {c.says}. Rule: {rule(c)}. {registered(artefact.paper, c.says)}" for c in artefact.claims] + [""]
    table = folder / f"{artefact.name}.md"
    if rows is None:
        lines += [f"No verdicts: {verdicts(None, artefact.claims[0], untestable(artefact))}.\n"]
        return "\n".join(lines)
    made = read_provenance(table.read_text()) if table.exists() else None
    if made is not None:
        state = "clean" if made.clean else "not all clean"
        lines += [f"Runs: [{table.name}]({table.name}), {made.runs} runs made at commit "
                  f"{', '.join(c[:7] + '-dirty' * c.endswith('-dirty') for c in made.commits) or 'unknown'} "
                  f"({state}); their compute time {duration(made.compute_s)}{made.where}.\n"]
    if table.exists() and artefact.claims:
        lines += [seeds_said(table.read_text(), artefact), explored(artefact.paper, artefact.name, folder)]
    numbered = ~rows["verdict"].str.startswith("not checked") | rows["pairs"].notna()  # decided, or reported
    if numbered.any():
        lines += ["| claim | where | means over seeds | paired difference (95% CI) | needs | verdict |",
                  "|---|---|---|---|---|---|"]
    for _, r in rows[numbered].iterrows():
        means = " vs ".join(", ".join(f"{k}: {v:.2f}" for k, v in side.items() if not pd.isna(v))
                            for side in (r["method"], r["versus"]) if side)
        lines.append(f"| {r['says']} | {checks.where_cell(r)} | {means} | {checks.paired_cell(r)} | "
                     f"{checks.needs_cell(r)} | {r['verdict']} |")
    skipped = rows[~numbered]
    if not skipped.empty:  # one line per point and reason, whichever claims it touches
        lines += ["", "Not checked:"] if numbered.any() else ["Not checked:"]
        points = skipped.groupby([skipped.apply(checks.where_cell, axis=1), skipped["verdict"]],
                                 sort=False)["says"].nunique()
        for (where, verdict), n in points.items():
            some = f" ({n} of its {len(artefact.claims)} claims)" if n < len(artefact.claims) else ""
            lines.append(f"- {where}: {verdict.removeprefix('not checked: ')}{some}")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
