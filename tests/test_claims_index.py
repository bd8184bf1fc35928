"""scripts/claims_index.py: results/CLAIMS.md lists every claim of paper/*.yaml once, with its rule and its data."""

from __future__ import annotations

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
