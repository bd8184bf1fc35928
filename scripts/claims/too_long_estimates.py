"""How long the presets that paper/*.yaml marks "too long here" would take on this machine: for each artefact with
such presets (a ``not_run`` reason that starts "too long here:"), ``fedrun-table <artefact> --presets <them> --seeds
<its claims' seeds> --estimate``, written to ``results/<paper>/<artefact>-estimate.md``, the file those reasons cite.

    python scripts/claims/too_long_estimates.py [--only ARTEFACT,...] [--results results]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

from fedrun.papers.artefacts import papers

TOO_LONG = "too long here:"


def too_long() -> list[tuple[str, str, list[str], int]]:
    """(paper, artefact, its too-long presets, the seeds its claims need) for every artefact that has such presets."""
    found = []
    for key, paper in papers().items():
        for artefact in paper.artefacts.values():
            presets = [p for p in artefact.presets if artefact.not_run.get(p, "").startswith(TOO_LONG)]
            if presets:
                found.append((key, artefact.name, presets, max((c.seeds for c in artefact.claims), default=5)))
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", default=None, help="these artefacts (comma-separated)")
    parser.add_argument("--results", default="results", help="the folder of the papers' committed tables")
    args = parser.parse_args(argv)
    chosen = args.only.split(",") if args.only else None
    for key, name, presets, seeds in too_long():
        if chosen and name not in chosen:
            continue
        command = [sys.executable, "-m", "fedrun.papers.table", name, "--presets", ",".join(presets), "--seeds",
                   str(seeds), "--estimate"]
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode:
            print(f"{name}: the estimate failed:\n{done.stderr}", file=sys.stderr)
            return done.returncode
        out = Path(args.results) / key / f"{name}-estimate.md"
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(done.stdout)
        print(f"{name} ({', '.join(presets)}) -> {out}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
