"""results/CLAIMS.md: every claim of the five papers (``paper/*.yaml``), one line each: its artefact, its rule
(pre-registered: seed-paired with the paper's effect; else the means over seeds), the datasets its runs need and
whether they are on this machine (docs/data.md says how to get each).

    python scripts/claims_index.py [--out results/CLAIMS.md]

Verdicts are not here: each comes from its artefact's table (``fedrun-table <artefact>``), made at one clean commit.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from fedrun.config.compose import compose_config
from fedrun.data import DATASETS
from fedrun.data.base import default_root
from fedrun.papers.artefacts import Claim, papers
from fedrun.rundir.files import git_commit


def rule(claim: Claim) -> str:
    if not claim.preregistered:
        return "means over seeds" + (f", margin {claim.margin:g}" if claim.margin else "")
    if claim.effects:
        effect = f"the paper's effect at each of {len(claim.effects)} points"
    else:
        effect = f"the paper's effect {claim.effect:g}"
    return f"pre-registered: {claim.seeds} seed pairs, 95% CI > 0 and mean >= {claim.share:g} x {effect}"


def datasets_of(artefact) -> list[str]:
    if artefact.measure:
        return sorted(set(artefact.data))
    return sorted({compose_config([f"experiment={preset}"]).data.name for preset in artefact.presets})


def status(datasets: list[str], present: dict[str, bool]) -> str:
    """Whether the claim's data is on this machine: yes, partly (naming what is missing) or no."""
    missing = [d for d in datasets if not present[d]]
    if not missing:
        return "yes"
    return f"{'no' if len(missing) == len(datasets) else 'partly'}: missing {', '.join(missing)}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="results/CLAIMS.md")
    args = parser.parse_args(argv)
    root = default_root()
    lines, present = [], {}
    for paper in papers().values():
        for artefact in paper.artefacts.values():
            if not artefact.claims:
                continue
            datasets = datasets_of(artefact)
            for d in datasets:
                present.setdefault(d, DATASETS[d].is_present(root))
            here = status(datasets, present)
            for claim in artefact.claims:
                lines.append(f"| {paper.cite} | {artefact.name} ({artefact.source}) | {claim.says} | {claim.value} | "
                             f"{rule(claim)} | {', '.join(datasets)} | {here} |")
    command = "python scripts/claims_index.py " + " ".join(argv if argv is not None else sys.argv[1:])
    text = (f"# Every claim of the five papers\n\nMade by `{command.strip()}` at commit {git_commit()} on "
            f"{time.strftime('%Y-%m-%d')}, from `paper/*.yaml`, with the data under {root} at the time. A claim's "
            "verdict is in its artefact's table (`fedrun-table <artefact>`, results/<paper>/), made from runs of one "
            "clean commit; the rule says how it is decided (docs/papers.md#pre-registered-claims).\n\n"
            "| paper | artefact | claim | value | rule | data | data on this machine |\n|---|---|---|---|---|---|---|\n"
            + "\n".join(lines) + "\n")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    print(f"{len(lines)} claims -> {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
