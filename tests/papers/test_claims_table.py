"""A table's claims: compared on the means over seeds or by the paired rule registered before the runs, with
effects per grid value or the paper's own, tuned claims at each side's best value, and points left out with why."""

import math
import re
from dataclasses import replace

import pandas as pd
import pytest
import yaml

from fedrun.papers.artefacts import PRESET, artefacts
from table_cases import _paired_runs

def test_a_claim_compares_grid_points_on_the_mean_over_seeds_at_each_point_of_the_other_keys():
    from fedrun.papers.claims import check
    from fedrun.papers.artefacts import Claim

    table = pd.DataFrame({PRESET: ["m", "m", "m", "f", "f"],
                          "algo": ["fedavg", "fedavg", "scaffold", "fedavg", "fedavg"],
                          "dgt": ["none", "dgt", "none", "none", "dgt"], "runs": [2, 2, 1, 1, 1],
                          "rounds": [10.0, 7.0, 8.0, 5.0, 4.0], "acc": [80.0, 80.4, 85.0, 70.0, 71.0],
                          "fixture": ["", "", "", "a fixture", "a fixture"]})
    keys = [PRESET, "algo", "dgt"]
    faster = Claim("faster", "rounds", "dgt", ("dgt",), ("none",), better="lower")
    out = check((faster,), table, keys)
    assert out["where"].tolist() == [{PRESET: "m", "algo": "fedavg"}, {PRESET: "m", "algo": "scaffold"},
                                     {PRESET: "f", "algo": "fedavg"}]
    assert out["verdict"].tolist() == ["holds", "not checked: no finished run of ['dgt']", "not checked: fixture data"]
    assert out["method"][0] == {"dgt": 7.0} and out["versus"][0] == {"none": 10.0}
    higher = Claim("higher", "acc", "dgt", ("dgt",), ("none",))
    assert check((higher,), table, keys)["verdict"][0] == "holds"
    assert check((replace(higher, margin=0.5),), table, keys)["verdict"][0] == "does not hold"  # 0.4 < the margin
    # several rivals: better than the best of them; a value never reached (NaN) is the worst
    rivals = pd.DataFrame({"s": ["gift", "afl", "adacomm"], "runs": [1, 1, 1], "t": [40.0, float("nan"), 45.0],
                           "fixture": ["", "", ""]})
    first = Claim("first", "t", "s", ("gift",), ("afl", "adacomm"), better="lower")
    assert check((first,), rivals, ["s"], reaching=frozenset({"t"}))["verdict"].tolist() == ["holds"]
    assert check((replace(first, method=("adacomm",), versus=("gift", "afl")),), rivals, ["s"],
                 reaching=frozenset({"t"}))["verdict"][0] == "does not hold"
    # a value that is not a time to a level: missing is not the worst, the claim is not checked
    assert check((first,), rivals, ["s"])["verdict"][0] == "not checked: no value for ['afl']"
    assert check((replace(first, key="nothing"),), rivals, ["s"])["verdict"][0] == "not checked: no runs sweep nothing"
    # sides in different presets of one grid: pooled across them
    split = pd.DataFrame({PRESET: ["proposed", "baselines"], "algo": ["ga", "fedprox"], "runs": [1, 1],
                          "acc": [90.0, 85.0], "fixture": ["", ""]})
    above = Claim("above", "acc", "algo", ("ga",), ("fedprox",))
    assert check((above,), split, [PRESET, "algo"])["verdict"].tolist() == [
        "not checked: no finished run of ['fedprox']", "not checked: no finished run of ['ga']"]
    assert check((replace(above, across=(PRESET,)),), split, [PRESET, "algo"])["verdict"].tolist() == ["holds"]
    # a preset without any run is one point not checked, with why where the artefact's not_run says it
    idle = pd.concat([table, pd.DataFrame({PRESET: ["g", "g", "r"], "algo": ["fedavg"] * 3,
                                           "dgt": ["none", "dgt", "none"], "runs": [0, 0, 0]})])
    out = check((faster,), idle, keys, not_run={"g": "too long here"})
    assert out["verdict"].tolist()[:2] == ["not checked: too long here", "not checked: no finished run"]
    assert out["where"].tolist()[:2] == [{PRESET: "g"}, {PRESET: "r"}] and len(out) == 5


def test_a_preregistered_claim_is_decided_by_the_paired_rule_written_before_its_runs():
    """The rule: seed-paired differences in the claimed direction, their Student-t 95% interval, at least ``seeds``
    pairs; it holds when the interval excludes 0 and the mean reaches ``share`` of the paper's effect."""
    from fedrun.papers.artefacts import Claim
    from fedrun.papers.claims import check

    claim = Claim("DGT ends more accurate", "acc", "dgt", ("dgt",), ("none",), effect=2.0)  # the paper: +2 points
    table = pd.DataFrame({"dgt": ["dgt", "none"], "runs": [5, 5], "acc": [81.5, 80.0], "fixture": ["", ""]})

    def verdict(runs, c=claim):
        return check((c,), table, ["dgt"], runs=runs).iloc[0]

    clear = verdict(_paired_runs({s: 1.5 + 0.1 * s for s in range(5)}))  # +1.5..+1.9: above the margin of 1.0
    assert clear["verdict"] == "holds" and clear["pairs"] == 5 and clear["interval"][0] > 0
    assert clear["difference"] == pytest.approx(1.7) and clear["needs"] == pytest.approx(1.0)
    small = verdict(_paired_runs({s: 0.5 + 0.05 * s for s in range(5)}))  # consistent, but under half the effect
    assert small["verdict"] == "does not hold" and small["interval"][0] > 0
    noisy = verdict(_paired_runs({0: 4.0, 1: -3.0, 2: 3.5, 3: -2.5, 4: 4.0}))  # a mean of 1.2 whose interval has 0
    assert noisy["verdict"] == "does not hold" and noisy["interval"][0] < 0 < noisy["interval"][1]
    lower = verdict(_paired_runs({s: -1.5 for s in range(5)}), replace(claim, better="lower"))  # lower is better
    assert lower["verdict"] == "holds" and lower["difference"] == pytest.approx(1.5)
    failed = verdict(_paired_runs({s: 1.5 for s in range(5)}, status={("dgt", 3): "failed"}))
    assert failed["verdict"] == "not decided: 4 of the 5 seed pairs it needs (seed 3: method failed)"
    missing = verdict(_paired_runs({s: 1.5 for s in range(5)}, status={("none", 4): None}))
    assert missing["verdict"] == "not decided: 4 of the 5 seed pairs it needs (seed 4: versus not run)"
    diverged = verdict(_paired_runs({s: 1.5 for s in range(5)}, status={("dgt", 2): "diverged"}))  # an outcome
    assert diverged["pairs"] == 5
    assert verdict(_paired_runs({s: 1.5 for s in range(3)}), replace(claim, seeds=3))["verdict"] == "holds"
    by_point = replace(claim, effect=None, effects=((((PRESET, "p"),), 2.0),))  # the paper's effect at a preset
    running = pd.DataFrame({PRESET: ["p"], "dgt": [float("nan")], "runs": [2], "acc": [float("nan")]})
    still = _paired_runs({0: 1.0}, status={("dgt", 0): "running", ("none", 0): "running"}).assign(**{PRESET: "p"})
    unfinished = check((by_point,), running, [PRESET, "dgt"], runs=still)  # no side has finished a run
    assert unfinished["verdict"].tolist() == ["not checked: no finished run of ['dgt', 'none']"]
    legacy = check((replace(claim, effect=None),), table, ["dgt"], runs=_paired_runs({0: 1.0})).iloc[0]
    assert legacy["verdict"] == "holds" and pd.isna(legacy["pairs"])  # without an effect: the means, as before
    from fedrun.papers.claims import markdown as claims_markdown

    text = claims_markdown(check((claim,), table, ["dgt"], runs=_paired_runs({s: 1.5 for s in range(5)})))
    assert ("paired difference 1.5 (95% t-interval 1.5 to 1.5, 5 seeds; needs > 0 and >= 1; one-sided p 0 (t-test, "
            "decides), 0.0312 (sign-flip); power at the paper's effect 100%) -> **holds**") in text


def test_a_preregistered_claim_names_its_rule_in_the_papers_file(tmp_path, monkeypatch):
    """effect > 0, seeds >= 2, share in [0, 1], and one value a side: else the paper's file is refused naming it."""
    from fedrun.errors import ConfigError
    from fedrun.papers import artefacts

    base = {"says": "x", "value": "accuracy", "method": {"algo": "dgt"}, "versus": {"algo": "fedavg"}}
    for bad, says in (({"effect": -1}, "effect=-1"), ({"effect": 1, "seeds": 1}, "seeds=1"),
                      ({"effect": 1, "share": 2}, "share=2"),
                      ({"effect": 1, "method": {"algo": ["dgt", "gift"]}}, "pairs one method value")):
        with pytest.raises(ConfigError, match=re.escape(says)):
            artefacts._claims([base | bad], (artefacts.Value("accuracy", "final_test_acc"),), "paper/x.yaml")
    accuracy = (artefacts.Value("accuracy", "final_test_acc"),)
    (claim,) = artefacts._claims([base | {"effect": 0.9, "seeds": 10}], accuracy, "p")
    assert (claim.effect, claim.seeds, claim.share) == (0.9, 10, 0.5)
    rivals = base | {"effect": 1, "versus": {"algo": ["fedavg", "fedprox"]}}
    with pytest.raises(ConfigError, match=re.escape("write {versus} in its says")):  # both would read the same
        artefacts._claims([rivals], accuracy, "p")
    each = artefacts._claims([rivals | {"says": "dgt beats {versus}"}], accuracy, "p")
    assert [(c.says, c.versus, c.effect) for c in each] == [("dgt beats fedavg", ("fedavg",), 1.0),
                                                          ("dgt beats fedprox", ("fedprox",), 1.0)]
    (means,) = artefacts._claims([base | {"versus": {"algo": ["fedavg", "fedprox"]}}], accuracy, "p")
    assert means.versus == ("fedavg", "fedprox")  # without an effect: one claim on the means, beating each


def test_gift_controls_registers_one_paired_claim_per_smaller_fixed_tau():
    """The fixed-tau rule is stated once in paper/gift.yaml and composes into one paired claim per tau: equal
    synchronisations leave tau = 100 to Table 1 (the paper's own gain), equal time takes every tau."""

    for name, taus in (("gift_controls", (50, 25, 10)), ("gift_controls_time", (100, 50, 25, 10))):
        paired = [c for c in artefacts()[name][1].claims if c.effect is not None]
        assert [(c.method, c.versus, c.effect, c.seeds, c.share) for c in paired] == \
            [(("gift",), (f"fixed_tau{t}",), 1.0, 5, 0.5) for t in taus]
        assert all(f"fixed_tau{t}" in c.says and "{" not in c.says for c, t in zip(paired, taus))


def test_a_preregistered_effect_may_differ_by_a_grid_keys_value():
    """DGT states its gain per dataset: effect {preset: {...}} gives each point its own margin; a point the paper
    states nothing of is not checked."""
    from fedrun.papers import artefacts
    from fedrun.papers.claims import check

    (claim,) = artefacts._claims([{"says": "x", "value": "acc", "method": {"dgt": "dgt"}, "versus": {"dgt": "none"},
                                   "effect": {PRESET: {"mnist": 2, "fmnist": 10}}}],
                                 (artefacts.Value("acc", "final_test_acc"),), "p")
    runs = pd.concat([_paired_runs({s: 1.5 for s in range(5)}).assign(**{PRESET: p}) for p in ("mnist", "fmnist",
                                                                                                  "cifar")])
    table = pd.DataFrame({PRESET: ["mnist", "mnist", "fmnist", "fmnist", "cifar", "cifar"],
                          "dgt": ["dgt", "none"] * 3, "runs": [5] * 6, "acc": [81.5, 80.0] * 3,
                          "fixture": [""] * 6})
    out = check((claim,), table, [PRESET, "dgt"], runs=runs)
    assert out["verdict"].tolist() == ["holds", "does not hold", f"not checked: the paper states no effect at "
                                                                 f"{PRESET}=cifar"]
    assert out["needs"].tolist()[:2] == [1.0, 5.0]
    # where the paper states no effect, the paired difference is reported, not decided
    assert (out["pairs"].iloc[2], out["difference"].iloc[2]) == (5, pytest.approx(1.5))
    assert math.isnan(out["needs"].iloc[2]) and out["interval"].iloc[2] == (pytest.approx(1.5), pytest.approx(1.5))
    from fedrun.papers.claims import markdown

    assert f"x ({PRESET}=cifar): dgt: 81.5; none: 80 (acc); paired difference 1.5 (95% t-interval 1.5 to 1.5, 5 " \
        "seeds; reported, not decided; one-sided p 0 (t-test, decides), 0.0312 (sign-flip)) -> **not checked: the " \
        f"paper states no effect at {PRESET}=cifar**" in markdown(out)


def test_a_preregistered_effect_may_be_the_papers_own_difference_at_each_point():
    """effect: paper takes each point's effect from the paper's printed numbers (method minus versus there); a point
    where the paper's own numbers show no gain is not checked, and a point it prints nothing of neither."""
    from fedrun.papers import artefacts
    from fedrun.papers.claims import check

    values = (artefacts.Value("acc", "final_test_acc"),)
    numbers = artefacts._numbers("preset, algo, h, acc\nmnist, fedavg, none, 80.0\nmnist, fedavg, gh, 82.0\n"
                                 "mnist, prox, none, 70.0\nmnist, prox, gh, 69.5\n", values, "p")
    (claim,) = artefacts._claims([{"says": "x", "value": "acc", "method": {"h": "gh"}, "versus": {"h": "none"},
                                   "effect": "paper"}], values, "p", numbers)
    assert claim.paper_effect({"preset": "mnist", "algo": "fedavg"}) == pytest.approx(2.0)
    assert claim.paper_effect({"preset": "mnist", "algo": "prox"}) == pytest.approx(-0.5)
    runs = pd.concat([_paired_runs({s: 1.5 for s in range(5)}).rename(columns={"dgt": "h"}).replace(
        {"h": {"dgt": "gh"}}).assign(preset="mnist", algo=a) for a in ("fedavg", "prox", "nova")])
    table = pd.DataFrame({"preset": ["mnist"] * 6, "algo": ["fedavg", "fedavg", "prox", "prox", "nova", "nova"],
                          "h": ["gh", "none"] * 3, "runs": [5] * 6, "acc": [81.5, 80.0] * 3, "fixture": [""] * 6})
    out = check((claim,), table, ["preset", "algo", "h"], runs=runs)
    assert out["verdict"].tolist() == [
        "holds", "not checked: the paper's own numbers show no gain at algo=prox, preset=mnist (-0.5)",
        "not checked: the paper states no effect at algo=nova, preset=mnist"]
    assert out["needs"].iloc[0] == pytest.approx(1.0)
    with pytest.raises(Exception, match="effect=paper, but the paper's numbers have no 'acc'"):
        artefacts._claims([{"says": "x", "value": "acc", "method": {"h": "gh"}, "versus": {"h": "other"},
                            "effect": "paper"}], values, "p", numbers)


def test_a_tuned_claim_compares_each_side_at_its_own_best_value_of_the_tuned_key():
    """tuned: each side takes the value of the key (a server lr) with its best mean over seeds; the paired rule then
    pairs the runs at those two values. Untuned, the same runs compare at each lr."""
    from fedrun.papers import artefacts
    from fedrun.papers.claims import check, markdown as claims_markdown

    values = (artefacts.Value("acc", "final_test_acc"),)
    (claim,) = artefacts._claims([{"says": "gh beats its base", "value": "acc", "method": {"h": "gh"},
                                   "versus": {"h": "none"}, "effect": 2, "tuned": "lr"}], values, "p")
    assert claim.tuned == "lr"
    # the base is best at lr 2 (84), gh at lr 1 (83): gh beats the base at lr 1 but not at the base's best
    means = {("none", "1"): 80.0, ("none", "2"): 84.0, ("gh", "1"): 83.0, ("gh", "2"): 82.0}
    runs = pd.DataFrame([{"h": h, "lr": lr, "seed": s, "status": "finished", "acc": m + 0.1 * s}
                         for (h, lr), m in means.items() for s in range(5)])
    table = pd.DataFrame([{"h": h, "lr": lr, "runs": 5, "acc": m + 0.2, "fixture": ""} for (h, lr), m in means.items()])
    row = check((claim,), table, ["h", "lr"], runs=runs).iloc[0]
    assert row["tuned"] == "lr: gh 1 (the grid's end), none 2 (the grid's end)"  # the best may lie beyond the grid
    wider = pd.concat([table, pd.DataFrame([{"h": h, "lr": "4", "runs": 5, "acc": 70.0, "fixture": ""}
                                            for h in ("gh", "none")]),
                       pd.DataFrame([{"h": h, "lr": "0.5", "runs": 5, "acc": 70.0, "fixture": ""}
                                     for h in ("gh", "none")])], ignore_index=True)
    row = check((claim,), wider, ["h", "lr"], runs=runs).iloc[0]
    assert row["tuned"] == "lr: gh 1, none 2"
    assert row["method"] == {"gh": pytest.approx(83.2)} and row["versus"] == {"none": pytest.approx(84.2)}
    assert row["difference"] == pytest.approx(-1.0) and row["verdict"] == "does not hold"
    assert "each at its best lr: gh 1, none 2" in claims_markdown(check((claim,), wider, ["h", "lr"], runs=runs))
    untuned = check((replace(claim, tuned=None),), table, ["h", "lr"], runs=runs)
    assert untuned["verdict"].tolist() == ["holds", "does not hold"]  # +3 at lr 1, -2 at lr 2
    assert untuned["where"].tolist() == [{"lr": "1"}, {"lr": "2"}]
    # the base better at lr 1 too: then gh's gain at its best counts
    better = table.assign(acc=[85.2, 84.2, 83.2, 82.2])
    shifted = runs.assign(acc=runs["acc"] + ((runs["h"] == "none") & (runs["lr"] == "1")) * 5.0)
    row = check((claim,), better, ["h", "lr"], runs=shifted).iloc[0]
    assert row["tuned"].startswith("lr: gh 1 (") and row["difference"] == pytest.approx(-2.0)
    lower = check((replace(claim, better="lower", effect=1.0),), table, ["h", "lr"], runs=runs).iloc[0]
    assert lower["tuned"].replace(" (the grid's end)", "") == "lr: gh 2, none 1"  # lower: the lowest mean
    assert check((replace(claim, tuned="momentum"),), table, ["h", "lr"], runs=runs)["verdict"].tolist() == [
        "not checked: no runs sweep momentum, the key it is tuned over"]
    # the paper's numbers at its own lr: the effect holds wherever each side's best lr is
    numbers = artefacts._numbers("h, lr, acc\nnone, 1, 78.0\ngh, 1, 82.0\n", values, "p")
    (paper,) = artefacts._claims([{"says": "x", "value": "acc", "method": {"h": "gh"}, "versus": {"h": "none"},
                                   "effect": "paper", "tuned": "lr"}], values, "p", numbers)
    assert paper.paper_effect({}) == pytest.approx(4.0)
    with pytest.raises(Exception, match="tuned=3"):
        artefacts._claims([{"says": "x", "value": "acc", "method": {"h": "gh"}, "versus": {"h": "none"},
                            "tuned": 3}], values, "p")


def test_a_point_the_artefact_names_not_checked_is_not_counted_with_why(tmp_path):
    """A base that is another base on this model (FedDecorr on a perceptron is FedAvg) is named in the artefact's
    not_checked and left out of the verdicts with why, so one result is not counted twice."""
    from fedrun.errors import ConfigError
    from fedrun.papers import artefacts
    from fedrun.papers.claims import check

    paper = tmp_path / "p.yaml"
    entry = {"presets": ["syn", "img"], "source": "Table 1", "claims": [
        {"says": "gh helps", "method": {"h": "gh"}, "versus": {"h": "none"}}]}
    bad = {"cite": "c", "title": "t", "artefacts": {"t1": entry | {"not_checked": [{"algo": "decorr"}]}}}
    paper.write_text(yaml.safe_dump(bad))
    with pytest.raises(ConfigError, match=r"not_checked\[0\]"):
        artefacts.read_paper(paper)
    good = {"cite": "c", "title": "t", "artefacts": {"t1": entry | {"not_checked": [
        {"at": {PRESET: "syn", "algo": "decorr"}, "why": "FedDecorr is FedAvg on a perceptron"}]}}}
    paper.write_text(yaml.safe_dump(good))
    art = artefacts.read_paper(paper).artefacts["t1"]
    table = pd.DataFrame([{PRESET: p, "algo": a, "h": h, "runs": 1, "value": 80.0 + (h == "gh"), "fixture": ""}
                          for p in ("syn", "img") for a in ("avg", "decorr") for h in ("gh", "none")])
    out = check(art.claims, table, [PRESET, "algo", "h"], not_checked=art.not_checked)
    assert out["verdict"].tolist() == ["holds", "not checked: FedDecorr is FedAvg on a perceptron", "holds", "holds"]
    assert out["where"][1] == {PRESET: "syn", "algo": "decorr"}
