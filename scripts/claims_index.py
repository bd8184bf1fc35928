"""results/CLAIMS.md: every claim of the five papers (``paper/*.yaml``), one line each: its artefact, its rule
(pre-registered: seed-paired with the paper's effect; else the means over seeds), its verdicts, the datasets its runs
need and whether they are on this machine (docs/data.md says how to get each).

    python scripts/claims_index.py [--out results/CLAIMS.md] [--results results]

The verdicts are counted from each artefact's committed table (``fedrun-table <artefact>`` writes
``results/<paper>/<artefact>_claims.csv`` beside it, one row per claim and point): how many points hold, do not hold,
are not decided (too few seed pairs) or not checked, with why; an artefact without such a table is "no verdict yet",
or "not testable here" with its ``not_run`` reasons where none of its presets can run on these machines.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from pathlib import Path

import pandas as pd

from fedrun.data import DATASETS
from fedrun.data.base import default_root
from fedrun.papers.artefacts import Claim, outline, papers
from fedrun.rundir.files import git_commit


def rule(claim: Claim) -> str:
    if not claim.preregistered:
        return "means over seeds" + (f", margin {claim.margin:g}" if claim.margin else "")
    if claim.effects:
        effect = f"the paper's effect at each of {len(claim.effects)} points"
    else:
        effect = f"the paper's effect {claim.effect:g}"
    tuned = f", each side at its best {claim.tuned}" if claim.tuned else ""
    return f"pre-registered: {claim.seeds} seed pairs{tuned}, 95% CI > 0 and mean >= {claim.share:g} x {effect}"


def verdicts(checked: pd.DataFrame | None, claim: Claim, not_run: dict[str, str] | None = None,
             presets: tuple[str, ...] = ()) -> str:
    """The claim's verdicts over its artefact's points, counted, the decided first: ``holds at 1 of 4 points; does
    not hold at 3; not checked at 8 (fixture data)``; without a table "not testable here" with why where the
    artefact's ``not_run`` names every one of its ``presets``, else "no verdict yet"."""
    if checked is None:
        if presets and set(presets) <= set(not_run or {}):
            return f"not testable here ({', '.join(sorted(set(not_run[p] for p in presets)))})"
        return "no verdict yet (no table with verdicts in results/)"
    mine = checked[checked["says"] == claim.says]
    if mine.empty:
        return "no verdict yet (the table predates the claim)"
    kinds = Counter(v.split(":", 1)[0] for v in mine["verdict"])
    why = {k: sorted({v.split(":", 1)[1].split(" (", 1)[0].strip() for v in mine["verdict"]
                      if v.startswith(k + ":")}) for k in kinds}
    order = ("holds", "does not hold", "not decided", "not checked")  # the decided first
    parts = []
    for i, (kind, n) in enumerate(sorted(kinds.items(), key=lambda kn: order.index(kn[0]) if kn[0] in order else 9)):
        parts.append(f"{kind} at {n}" + (f" of {len(mine)} points" if i == 0 else "")
                     + (f" ({', '.join(why[kind])})" if why[kind] else ""))
    return "; ".join(parts)


def datasets_of(artefact) -> list[str]:
    if artefact.measure:
        return sorted(set(artefact.data))
    return sorted({outline(preset)[1] for preset in artefact.presets})  # read, not composed (tests hold them equal)


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
    lines, present = [], {}
    for key, paper in papers().items():
        for artefact in paper.artefacts.values():
            if not artefact.claims:
                continue
            table = Path(args.results) / key / f"{artefact.name}_claims.csv"
            checked = pd.read_csv(table, dtype=str) if table.exists() else None
            datasets = datasets_of(artefact)
            for d in datasets:
                present.setdefault(d, DATASETS[d].is_present(root))
            here = status(datasets, present)
            for claim in artefact.claims:
                counted = verdicts(checked, claim, artefact.not_run, artefact.presets)
                lines.append(f"| {paper.cite} | {artefact.name} ({artefact.source}) | {claim.says} | {claim.value} | "
                             f"{rule(claim)} | {counted} | {', '.join(datasets)} | {here} |")
    command = "python scripts/claims_index.py " + " ".join(argv if argv is not None else sys.argv[1:])
    text = (f"# Every claim of the five papers\n\nMade by `{command.strip()}` at commit {git_commit()} on "
            f"{time.strftime('%Y-%m-%d')}, from `paper/*.yaml` and the tables in {args.results}/, with the data under "
            f"{root} at the time. The verdicts count the points of the claim's artefact table (`fedrun-table "
            "<artefact>`, results/<paper>/; its header names the runs' commit), decided by the rule "
            "(docs/papers.md#pre-registered-claims); a point on a stand-in dataset, or without finished runs, is "
            "not checked.\n\n"
            "| paper | artefact | claim | value | rule | verdicts | data | data on this machine |\n"
            "|---|---|---|---|---|---|---|---|\n"
            + "\n".join(lines) + "\n")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    print(f"{len(lines)} claims -> {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
