"""scripts/repo/claims_index.py: results/CLAIMS.md lists every claim of paper/*.yaml once, with its rule, the verdicts
of its artefact's table counted, and its data."""

from __future__ import annotations

import shutil
from dataclasses import replace

import pandas as pd
from conftest import REPO, load_script

from fedrun.papers.artefacts import papers


def test_the_index_lists_every_claim_once_with_its_rule_and_data(tmp_path):
    index = load_script("claims_index")
    out = tmp_path / "CLAIMS.md"
    results = tmp_path / "results"  # the committed verdicts, copied: the run writes each paper's claims.md there
    shutil.copytree(REPO / "results", results,
                    ignore=shutil.ignore_patterns("*.png"))
    assert index.main(["--out", str(out), "--results", str(results)]) == 0
    assert (results / "gift" / "claims.md").read_text().startswith("# GIFT")
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
    assert index.verdicts(checked, second) == "not decided at 1 of 1 point (3 of the 5 seed pairs it needs)"
    assert index.verdicts(None, first).startswith("no verdict yet")
    artefact = replace(paper.artefacts["bherd_table2"], presets=("a", "b"))
    assert index.untestable(replace(artefact, not_run={"a": "no data"})) == [], "b may run"
    why = index.untestable(replace(artefact, not_run={"b": "too long here", "a": "no data"}))
    assert index.verdicts(None, first, why) == "not testable here (no data, too long here)"
    out = tmp_path / "CLAIMS.md"
    assert index.main(["--out", str(out), "--results", str(tmp_path)]) == 0
    line, = [row for row in out.read_text().splitlines() if f"| {first.says} |" in row]
    assert ("| **mixed** | holds at 1 of 4 points; does not hold at 2; not checked at 1 (fixture data); "
            "pre-registered, seed-paired, on cifar10, imdb, mnist |") in line  # no point named: the artefact's data


def test_a_claims_verdict_in_a_word_and_long_reasons_as_notes(tmp_path):
    """CLAIMS.md's verdict column: holds or does not hold where the decided points agree, mixed where not, reported
    where only a paired difference without a margin exists, no verdict yet where runs may come, not testable here
    where none can; a long reason is a numbered note under the table, said once however many rows cite it."""
    index = load_script("claims_index")
    claim = next(c for p in papers().values() for a in p.artefacts.values() for c in a.claims)

    def word(*verdicts, pairs=None):
        checked = pd.DataFrame({"says": claim.says, "verdict": list(verdicts),
                                "pairs": pairs or [float("nan")] * len(verdicts)})
        return index.overall(checked, claim)

    assert word("holds", "holds", "not checked: fixture data") == "holds"
    assert word("does not hold", "not checked: no data") == "does not hold"
    assert word("holds", "does not hold") == "mixed"
    assert word("not checked: the paper states no effect at x", pairs=[5]) == "reported, not decided"
    assert word("not decided: 3 of the 5 seed pairs it needs (seed 4: not run)", pairs=[3]) == "no verdict yet"
    assert word("not checked: no finished run") == "no verdict yet"
    assert word("not checked: CIFAR-10 cannot be fetched") == "not testable here"
    assert index.overall(None, claim, ["no data"]) == "not testable here"
    assert index.overall(None, claim) == "no verdict yet"

    long = "too long here: a round took 50 s on a 2-core CPU (rounds 2-3 of a run), 140 hours for its 100 runs"
    notes = index.Notes()
    checked = pd.DataFrame({"says": claim.says, "verdict": ["does not hold", f"not checked: {long}",
                                                           "not checked: no data (seed 1: failed)"]})
    counted = index.verdicts(checked, claim, say=notes.cite)
    assert counted == "does not hold at 1 of 3 points; not checked at 2 (no data, note 1)", "detail dropped, not why"
    assert index.verdicts(None, claim, [long], notes.cite) == "not testable here (note 1)"
    assert notes.markdown() == f"\nNotes:\n\n1. {long}\n"
    assert index.Notes().markdown() == ""


def test_a_tables_header_is_read_back_as_written():
    """The claims pages take the runs' commits, compute time and machines from each table's header: what
    ``provenance`` writes, ``read_provenance`` reads, clean or not, machines recorded or not."""
    from fedrun.papers.table_summary import provenance, read_provenance

    clean = [{"git_commit": "a" * 40, "wall_time_s": 100.0, "machine": "AMD EPYC 7B13 (2 threads)"},
             {"git_commits": ["a" * 40], "total_wall_time_s": 50.5, "machines": ["AMD EPYC 7B13 (2 threads)"]}]
    made = read_provenance(provenance("fedrun-table x", clean) + " Mean ± std over seeds [0, 1] of `final_test_acc`.")
    assert (made.runs, made.commits, made.compute_s, made.clean) == (2, ("a" * 40,), 150.0, True)
    assert made.where == " on AMD EPYC 7B13 (2 threads)"
    mixed = [{"git_commit": "b" * 40 + "-dirty", "wall_time_s": 10.0}, {"git_commit": "c" * 40, "wall_time_s": 5.0}]
    made = read_provenance(provenance("fedrun-table x", mixed))
    assert made.commits == ("b" * 40 + "-dirty", "c" * 40) and not made.clean and made.runs == 2
    assert made.where.startswith("; where the runs ran is not recorded (this table was made on ")
    assert read_provenance("# a table typed by hand\n") is None


def test_each_papers_claims_page_gives_every_point_with_its_rule_runs_and_verdict(tmp_path):
    """results/<paper>/claims.md: each claim's rule, the table's runs (commit, clean, compute time, machine), a row
    per decided or reported point with the means, the paired difference and interval and what the rule needs, and
    the points not checked grouped by why (a preset without runs here: as its not_run says now, not as the table
    said); an artefact without verdicts says why; an old verdict file without the ``tuned`` column still reads; the
    figure draws every paired point, and is removed when none is left."""
    index = load_script("claims_index")
    (key, paper), = [(k, p) for k, p in papers().items() if "bherd_table2" in p.artefacts]
    first, second = paper.artefacts["bherd_table2"].claims[:2]
    folder = tmp_path / key
    folder.mkdir()
    (folder / "bherd_table2.md").write_text(
        "# t\n\nMade by `fedrun-table bherd_table2` at commit 1234 on 2026-01-01 from 20 runs made at commit "
        f"{'d' * 40}; their compute time 7200 s on AMD EPYC (2 threads). Mean ± std over seeds.\n")
    (folder / "bherd_table2_claims.csv").write_text(
        "says,where,value,method,versus,verdict,pairs,difference,interval,needs\n"  # before `tuned` was written
        f"{first.says},{{'partition': 'case1'}},value,{{'bherd': 86.5}},{{'fedavg': 86.0}},holds,5.0,0.5,"
        "\"(0.2, 0.8)\",0.46\n"
        f"{first.says},{{'preset': 'cnn'}},value,{{}},{{}},not checked: no CIFAR-10,,,,\n"
        f"{second.says},{{'preset': 'cnn'}},value,{{}},{{}},not checked: no CIFAR-10,,,,\n"
        f"{first.says},{{'preset': 'bherd_table2_rnn'}},value,{{}},{{}},not checked: a cost measured before,,,,\n"
        f"{second.says},{{'partition': 'case1'}},value,{{'bherd_fednova': 86.0}},{{'fednova': 86.1}},"
        "not decided: 3 of the 5 seed pairs it needs,3.0,-0.1,\"(-0.3, 0.1)\",0.68\n")
    fig = paper.artefacts["bherd_fig5a"]  # every point not checked: the list alone, without an empty table
    (folder / "bherd_fig5a_claims.csv").write_text(
        "says,where,value,method,versus,verdict\n"
        f"{fig.claims[0].says},{{'partition': 'case1'}},final,{{}},{{}},not checked: fixture data\n")
    assert index.main(["--out", str(tmp_path / "CLAIMS.md"), "--results", str(tmp_path)]) == 0
    page = (folder / "claims.md").read_text()
    section = page.split("## bherd_fig5a:")[1].split("\n## ")[0]
    assert "| claim |" not in section and "Not checked:\n- partition=case1: fixture data (1 of its" in section
    assert f"- {first.says}. Rule: pre-registered: 5 seed pairs, Student-t 95% interval > 0 (Holm over its points)" \
        in page
    assert f"Runs: [bherd_table2.md](bherd_table2.md), 20 runs made at commit {'d' * 7} (clean); their compute " \
           "time 2.0 h on AMD EPYC (2 threads)." in page
    assert (f"| {first.says} | partition=case1 | bherd: 86.50 vs fedavg: 86.00 | +0.50 (+0.20 to +0.80), 5 seeds "
            "(bootstrap, superseded) | >= 0.46 | holds |") in page  # a file from before the t-rule says so
    assert (f"| {second.says} | partition=case1 | bherd_fednova: 86.00 vs fednova: 86.10 | -0.10 (-0.30 to +0.10), "
            "3 seeds (bootstrap, superseded) | >= 0.68 | not decided: 3 of the 5 seed pairs it needs |") in page
    n = len(paper.artefacts["bherd_table2"].claims)
    assert f"- preset=cnn: no CIFAR-10 (2 of its {n} claims)" in page and page.count("no CIFAR-10") == 1
    now = paper.artefacts["bherd_table2"].not_run["bherd_table2_rnn"]  # not_run's reason now, not the table's
    assert f"- preset=bherd_table2_rnn: {now} (1 of its {n} claims)" in page and "measured before" not in page
    assert "No verdicts: no verdict yet" in page or "No verdicts: not testable here" in page  # the other artefacts
    assert "exploration.md" not in page
    # what the page's figure draws: the paired points only
    points = index.paired_points(paper, index.verdict_files(paper, folder))
    assert [(p["says"], p["difference"], p["interval"], p["needs"], p["panel"]) for p in points] == [
        (first.says, 0.5, (0.2, 0.8), 0.46, "value: final_test_acc in %"),
        (second.says, -0.1, (-0.3, 0.1), 0.68, "value: final_test_acc in %")]
    assert (folder / "claims.png").stat().st_size > 0 and "![Each seed-paired difference" in page
    (folder / "bherd_table2_claims.csv").unlink()  # no paired point left: no figure, the old one removed
    assert index.main(["--out", str(tmp_path / "CLAIMS.md"), "--results", str(tmp_path)]) == 0
    assert not (folder / "claims.png").exists() and "![" not in (folder / "claims.md").read_text()
    (folder / "exploration.md").write_text("# before\n")
    assert index.main(["--out", str(tmp_path / "CLAIMS.md"), "--results", str(tmp_path)]) == 0
    assert "[exploration.md](exploration.md)" in (folder / "claims.md").read_text()


def test_a_verdict_says_what_it_rests_on_and_a_claim_true_by_construction_is_no_support():
    """The points column says how a decided claim was decided (pre-registered and paired, or on the means without
    an interval) and on which datasets its decided points ran; a claim the method's own rule makes true (GIFT's tau
    falling below 100) is "true by construction", counted apart from the claims that hold."""
    from dataclasses import replace

    index = load_script("claims_index")
    (_, paper), = [(k, p) for k, p in papers().items() if "gift_fig5" in p.artefacts]
    artefact = paper.artefacts["gift_fig5"]
    tau = next(c for c in artefact.claims if c.by_construction)
    checked = pd.DataFrame({"says": tau.says, "verdict": ["holds", "not checked: no CIFAR-10"],
                            "where": [{"preset": artefact.presets[-1]}, {"preset": artefact.presets[0]}]})
    data = index.dataset_of(checked.iloc[0], artefact)
    assert index.evidence(checked, tau, lambda r: index.dataset_of(r, artefact)) == \
        f"on the means over seeds, without an interval, on {data}"
    assert index.overall(checked, tau) == "true by construction"
    assert index.overall(checked, replace(tau, by_construction=None)) == "holds"
    paired = replace(tau, effect=1.0, by_construction=None)
    assert index.evidence(checked, paired, lambda r: "mnist") == "pre-registered, seed-paired, on mnist"
    assert index.evidence(checked.iloc[1:], tau, lambda r: "mnist") == ""  # nothing decided: nothing to rest on
