"""Every committed verdict recomputed from the committed per-run values alone: for each
``results/<paper>/<artefact>_runs.csv`` (written by ``fedrun-table`` beside its table), the artefact's claims are
checked again on those rows by the rule in fedrun/papers/claims.py and compared with ``<artefact>_claims.csv``.

    python scripts/claims/recompute_claims.py                 # exit 1 and name each difference, 0 when every one agrees

A verdict file without its runs file (decided before fedrun kept them) cannot be recomputed and is listed as such.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import pandas as pd

from fedrun.papers import claims
from fedrun.papers.artefacts import papers
from fedrun.papers.table_summary import RUNS_FILE_SUFFIX, read_runs, verdicts

REPO = Path(__file__).resolve().parents[2]
COMPARED = ("says", "verdict", "pairs", "difference", "needs", "p", "p_sign", "power")


def differences(committed: pd.DataFrame, again: pd.DataFrame) -> list[str]:
    """Where two verdict tables (claims.read's form) differ: each row's claim, point and compared fields, numbers to
    1e-9 relative."""
    if len(committed) != len(again):
        return [f"{len(committed)} verdict rows committed, {len(again)} recomputed"]
    out = []
    for i, (a, b) in enumerate(zip(committed.to_dict("records"), again.to_dict("records"))):
        for key in (*COMPARED, "interval", "where"):
            x, y = a.get(key), b.get(key)
            if not same(x, y):
                out.append(f"row {i} ({a['says']}, {claims.where_cell(a)}): {key} {x!r} committed, {y!r} recomputed")
    return out


def same(x, y) -> bool:
    if isinstance(x, tuple) and isinstance(y, tuple):
        return len(x) == len(y) and all(map(same, x, y))
    if isinstance(x, dict) and isinstance(y, dict):
        return {k: str(v) for k, v in x.items()} == {k: str(v) for k, v in y.items()}
    if isinstance(x, (int, float)) and isinstance(y, (int, float)):
        return (math.isnan(x) and math.isnan(y)) or math.isclose(x, y, rel_tol=1e-9, abs_tol=1e-12)
    return (pd.isna(x) and pd.isna(y)) if not isinstance(x, (str, dict, tuple)) else str(x) == str(y)


def recompute(results: Path) -> tuple[dict[str, list[str]], list[str]]:
    """Each recomputable artefact's differences (by its verdict file) and the verdict files without runs files."""
    found, unrecomputable = {}, []
    for paper in papers().values():
        for artefact in paper.artefacts.values():
            for verdict_file in sorted(results.glob(f"*/{artefact.name}_claims.csv")):
                runs_path = verdict_file.with_name(f"{artefact.name}{RUNS_FILE_SUFFIX}")
                if not runs_path.exists():
                    unrecomputable.append(str(verdict_file.relative_to(results)))
                    continue
                again = verdicts(artefact, read_runs(runs_path, artefact))
                with_types = verdict_file.with_name(f".{verdict_file.name}.recomputed")
                again.to_csv(with_types, index=False)  # through the file, as the committed one was read
                try:
                    found[str(verdict_file.relative_to(results))] = differences(
                        claims.read(verdict_file), claims.read(with_types))
                finally:
                    with_types.unlink()
    return found, unrecomputable


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--results", default=str(REPO / "results"))
    args = parser.parse_args(argv)
    found, unrecomputable = recompute(Path(args.results))
    for name, diffs in found.items():
        print(f"{name}: {'recomputed, the same' if not diffs else f'{len(diffs)} difference(s)'}")
        for d in diffs:
            print(f"  {d}")
    if unrecomputable:
        print(f"no runs file, so not recomputable (decided before fedrun-table kept one): {', '.join(unrecomputable)}")
    return 1 if any(found.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
