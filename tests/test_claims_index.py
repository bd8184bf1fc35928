"""scripts/claims_index.py: results/CLAIMS.md lists every claim of paper/*.yaml once, with its rule, the verdicts of
its artefact's table counted, and its data."""

from __future__ import annotations

import pandas as pd
from conftest import load_script

from fedrun.papers.artefacts import papers


def test_the_index_lists_every_claim_once_with_its_rule_and_data(tmp_path):
    index = load_script("claims_index")
    out = tmp_path / "CLAIMS.md"
    assert index.main(["--out", str(out)]) == 0
    rows = [line for line in out.read_text().splitlines() if line.startswith("| ") and not line.startswith("| paper")]
    claims = [(a.name, c) for p in papers().values() for a in p.artefacts.values() for c in a.claims]
    assert len(rows) == len(claims)
    for row, (name, claim) in zip(rows, claims):
        assert f"| {name} (" in row and f"| {claim.says} |" in row
        assert ("| pre-registered: " in row) is claim.preregistered
    assert index.status(["mnist", "cifar10"], {"mnist": True, "cifar10": False}) == "partly: missing cifar10"
    assert index.status(["cifar10"], {"cifar10": False}) == "no: missing cifar10"
    assert index.status(["mnist"], {"mnist": True}) == "yes"


def test_a_claims_verdicts_are_counted_from_its_tables_points(tmp_path):
    """The rows fedrun-table writes to <artefact>_claims.csv: each claim's points counted by verdict, the decided
    first, with why a point was not checked or not decided; a claim without rows has no verdict yet."""
    index = load_script("claims_index")
    (paper_key, paper), = [(k, p) for k, p in papers().items() if "bherd_table2" in p.artefacts]
    first, second = paper.artefacts["bherd_table2"].claims[:2]
    folder = tmp_path / paper_key
    folder.mkdir()
    pd.DataFrame({"says": [first.says] * 4 + [second.says], "verdict": [
        "does not hold", "holds", "not checked: fixture data", "does not hold",
        "not decided: 3 of the 5 seed pairs it needs (seed 3: failed; seed 4: not run)"]}).to_csv(
        folder / "bherd_table2_claims.csv", index=False)
    checked = pd.read_csv(folder / "bherd_table2_claims.csv", dtype=str)
    assert index.verdicts(checked, first) == ("holds at 1 of 4 points; does not hold at 2; not checked at 1 "
                                              "(fixture data)")
    assert index.verdicts(checked, second) == "not decided at 1 of 1 points (3 of the 5 seed pairs it needs)"
    assert index.verdicts(None, first).startswith("no verdict yet")
    assert index.verdicts(None, first, {"a": "no data"}, ("a", "b")).startswith("no verdict yet"), "b may run"
    assert index.verdicts(None, first, {"a": "no data", "b": "too long here"}, ("a", "b")) == \
        "not testable here (no data, too long here)"
    out = tmp_path / "CLAIMS.md"
    assert index.main(["--out", str(out), "--results", str(tmp_path)]) == 0
    line, = [row for row in out.read_text().splitlines() if f"| {first.says} |" in row]
    assert "| holds at 1 of 4 points; does not hold at 2; not checked at 1 (fixture data) |" in line
