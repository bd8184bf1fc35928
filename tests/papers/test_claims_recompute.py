"""Every verdict recomputable from results/ alone: ``fedrun-table`` keeps each artefact's per-run values
(``<artefact>_runs.csv``) beside its verdicts, and scripts/claims/recompute_claims.py checks the claims again on
them."""

from __future__ import annotations

import itertools
from dataclasses import replace

import numpy as np
import pandas as pd

from conftest import REPO, load_script
from fedrun.papers.artefacts import artefacts


def test_a_paired_verdict_is_recomputed_from_its_runs_file_alone_and_a_changed_value_is_caught(tmp_path):
    """A pre-registered claim over two points (BHerd against FedAvg at 2 and at 3 clients), five seeds each: the
    verdicts computed from the runs' rows equal those computed from <artefact>_runs.csv read back, and a runs file
    changed afterwards (one value) gives differences the recomputation names."""
    from fedrun.papers.artefacts import Claim
    from fedrun.papers.table_summary import read_runs, runs_file, verdicts

    recompute = load_script("recompute_claims")
    _, base = artefacts()["bherd_fig8c"]
    value = base.values[0].name
    claim = Claim("x ends more accurate", value, "algo", ("bherd",), ("fedavg",), effect=1.0)
    artefact = replace(base, name="tiny_paired", claims=(claim,), values=base.values[:1], not_checked=())
    rng = np.random.default_rng(0)
    rows = [{"run_dir": f"r{i}", "preset": "bherd_fig8c", "algo": algo, "fl.num_clients": str(n), "seed": seed,
             "status": "finished", "error": None, "diverged_round": None, "rounds_completed": 2,
             value: 80.0 + seed + (gain + rng.normal(0, 0.3) if algo == "bherd" else 0.0), "rounds": 2,
             "planned_rounds": 2, "fixture": "", "summary": {"commit": "abc"}, "overrides": ""}
            for i, (n, gain, algo, seed) in enumerate(itertools.product((2, 3), (1.5,), ("bherd", "fedavg"),
                                                                          range(5)))]
    runs = pd.DataFrame(rows)
    checked = verdicts(artefact, runs)
    assert checked["pairs"].tolist() == [5, 5] and set(checked["verdict"]) == {"holds"}
    folder = tmp_path / "p"
    folder.mkdir()
    runs_file(runs).to_csv(folder / "tiny_paired_runs.csv", index=False)
    checked.to_csv(folder / "tiny_paired_claims.csv", index=False)
    again = verdicts(artefact, read_runs(folder / "tiny_paired_runs.csv", artefact))
    again.to_csv(tmp_path / "again.csv", index=False)
    assert recompute.differences(claims_read(folder / "tiny_paired_claims.csv"), claims_read(tmp_path / "again.csv")) \
        == []
    kept = pd.read_csv(folder / "tiny_paired_runs.csv")
    kept.loc[0, value] += 5.0
    kept.to_csv(folder / "tiny_paired_runs.csv", index=False)
    edited = verdicts(artefact, read_runs(folder / "tiny_paired_runs.csv", artefact))
    edited.to_csv(tmp_path / "edited.csv", index=False)
    said = recompute.differences(claims_read(folder / "tiny_paired_claims.csv"), claims_read(tmp_path / "edited.csv"))
    assert said and all("row 0" in line for line in said) and any("difference" in line for line in said)


def claims_read(path):
    from fedrun.papers.claims import read

    return read(path)


def test_every_committed_verdict_with_a_runs_file_is_what_its_runs_give():
    """scripts/claims/recompute_claims.py over results/: every verdict file that has its runs file beside it recomputes
    to the same verdicts, intervals and p-values (files decided before fedrun kept runs files are listed, not
    compared)."""
    found, _ = load_script("recompute_claims").recompute(REPO / "results")
    assert {name: diffs for name, diffs in found.items() if diffs} == {}
