"""Whether tables ported to fedrun-table say what the scripts before them said (issue #26): the numbers of a
fedrun-table rendering against an earlier script's table, cell by cell.

    python scripts/repo/port_check.py fedgh --old OLD.csv [--new results/fedgh]
    python scripts/repo/port_check.py bherd-sweeps --old SWEEPS.md [--new results/bherd]
    python scripts/repo/port_check.py dgt --old FIG5.md [--new results/dgt]
    python scripts/repo/port_check.py fsvrg --old FIGS_MNIST.md [--new results/fsvrg]
    python scripts/repo/port_check.py gift-fig6 --old FIG6.md [--new results/gift]
    python scripts/repo/port_check.py bherd-table2 --old TABLE2.md [--new results/bherd]

``fedgh``: OLD.csv is ``tables.csv`` as scripts/fedgh_tables.py wrote it (``git show 2f97796:results/fedgh/tables.csv``,
or a fresh run of that script from history); the new side is fedrun-table's fedgh_table2/4/5.csv. ``bherd-sweeps``:
SWEEPS.md is sweeps.md as scripts/bherd_sweeps.py wrote it (``git show 1bb12da:results/bherd/sweeps.md``) against
the bherd_fig5a/8a/8b/8c.csv that ``fedrun-table bherd_fig...`` wrote (accuracy at rounds 10 and 50 and the final,
both cases). ``dgt``: FIG5.md is fig5.md as scripts/dgt_fig5.py wrote it (``git show cb05113:results/dgt/fig5.md``)
against dgt_fig5.csv (final accuracy, its mean over the last 10 rounds, rounds to the target, mean cosine of the
aggregated updates, per dataset and method). ``fsvrg``: FIGS_MNIST.md is figs_mnist.md as scripts/fsvrg_figs.py wrote it
(``git show 569f873:results/fsvrg/figs_mnist.md``, or ``seeds/figs_mnist.md``) against fsvrg_figs_mnist.csv (Fig. 1),
fsvrg_fig8/9/10_mnist.csv and fsvrg_open_mnist.csv (the final test accuracy per panel and method; a figure whose CSV
is absent is left out). ``gift-fig6``: FIG6.md is fig6.md as scripts/gift_figs.py wrote it (``git show
569f873:results/gift/fig6.md``) against gift_fig6.csv (rounds within the budget, best accuracy, simulated seconds to
the target, per setting and schedule). ``bherd-table2``: TABLE2.md is table2.md as scripts/bherd_table2.py wrote it
(``git show 569f873:results/bherd/table2.md``) against bherd_table2.csv (mean and std over seeds per model, algorithm
and case). ``rerun``: OLD.csv and NEW.csv are two ``fedrun-table`` renderings of one artefact from runs made at
other commits or on other machines (``git show <commit>:results/bherd/bherd_table2.csv > OLD.csv``), every value and
its std compared at each grid point, to the printed two decimals. Prints how many cells are equal (to the
old table's printed precision) and every cell that is not, and the largest difference.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import pandas as pd

NAMES = {"fedavg": "FedAvg", "fedprox": "FedProx", "fednova": "FedNova", "feddecorr": "FedDecorr"}
ALPHA = {"a01": "0.1", "a1": "1.0", "a001": "0.01"}


def fedgh_cells(new: Path) -> pd.DataFrame:
    """fedrun-table's FedGH tables keyed as fedgh_tables.py's tables.csv: (table, column, setting, method)."""
    rows = []
    for _, r in pd.read_csv(new / "fedgh_table2.csv").iterrows():
        parts = str(r["preset"]).split("_")  # fedgh_table2_<column>[_a<alpha>_c<C>]
        column = parts[2]
        method = ("+FedGH on " if r["algo/harmonizer"] == "fedgh" else "") + NAMES[r["algo"]]
        if len(parts) == 5:
            rows.append((2, column, f"alpha={ALPHA[parts[3]]}, C={parts[4][1:]}", method, r["acc_g"]))
        else:
            preset = "fedgh_sent140" if column == "twitter" else f"fedgh_{column}"
            rows += [(2, column, f"{preset}, Acc_l", method, r["acc_l"]), (2, column, f"{preset}, Acc_g", method,
                                                                            r["acc_g"])]
    for table, key, label in ((4, "fl.num_clients", "K"), (5, "fl.local_epochs", "E")):
        if not (new / f"fedgh_table{table}.csv").exists():  # a rendering of Table II's columns alone
            continue
        for _, r in pd.read_csv(new / f"fedgh_table{table}.csv").iterrows():
            v = float(r[key])
            rows.append((table, str(r["preset"]).split("_")[-1], f"{label}={int(v) if v.is_integer() else v}",
                         "+FedGH" if r["algo/harmonizer"] == "fedgh" else "FedAvg", r["value"]))
    return pd.DataFrame(rows, columns=["table", "column", "setting", "method", "new"])


def fedgh(old: Path, new: Path) -> pd.DataFrame:
    before = pd.read_csv(old).rename(columns={"fedrun": "old"})
    both = before.merge(fedgh_cells(new), on=["table", "column", "setting", "method"])
    both["equal"] = (both["old"] - both["new"]).abs() < 1e-9
    return both[["table", "column", "setting", "method", "old", "new", "equal"]]


def sweeps_cells(text: str) -> pd.DataFrame:
    """sweeps.md's rows (figure, case, swept value, acc@10, acc@50, acc@100)."""
    rows, fig = [], None
    for line in text.splitlines():
        heading = re.match(r"## (fig\w+):", line)
        if heading:
            fig = heading.group(1)
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if fig and len(cells) >= 5 and cells[0] in ("case1", "case2"):
            rows.append((fig, cells[0], float(cells[1]), *map(float, cells[2:5])))
    return pd.DataFrame(rows, columns=["fig", "partition", "value", "round 10", "round 50", "final"])


def bherd_sweeps(old: Path, new: Path) -> pd.DataFrame:
    swept = {"fig5a": "algo.step_selector.alpha", "fig8a": "fl.local_epochs", "fig8b": "fl.batch_size",
             "fig8c": "fl.num_clients"}
    before = sweeps_cells(old.read_text())
    out = []
    for fig, key in swept.items():
        after = pd.read_csv(new / f"bherd_{fig}.csv")
        for _, r in before[before["fig"] == fig].iterrows():
            match = after[(after["partition"] == r["partition"]) & (after[key].astype(float) == r["value"])]
            for col in ("round 10", "round 50", "final"):
                value = float(match[col].iloc[0]) if len(match) else float("nan")
                out.append((fig, r["partition"], r["value"], col, r[col], value, round(value, 2) == r[col]))
    return pd.DataFrame(out, columns=["fig", "partition", "value", "cell", "old", "new", "equal"])


DGT_COLUMNS = {"final acc %": "accuracy", "mean acc % (last 10)": "last10", "rounds to": "rounds to target",
               "mean cos (updates)": "cosine"}


def method_rows(text: str, heading: str):
    """(section, header, cells) of each row of the tables under the headings that match ``heading`` (its first group
    names the section) in a script's Markdown, with the cells of the table's header row (which starts "method")."""
    section, header = None, []
    for line in text.splitlines():
        if found := re.match(heading, line):
            section = found.group(1)
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if cells and cells[0] == "method":
            header = cells
        elif section and header and len(cells) == len(header) and cells[0] and not cells[0].startswith(":"):
            yield section, header, cells


def printed_cells(match: pd.DataFrame, header: list[str], cells: list[str], columns: dict[str, str]):
    """(column, old, new, equal) for each old cell whose header starts with a key of ``columns``: the new value
    rounded to the old cell's printed decimals; an empty old cell (never reached) equals a missing new one."""
    for name, value in zip(header, cells):
        column = next((c for k, c in columns.items() if name.startswith(k)), None)
        if column is None or not len(match):
            continue
        mine = float(match[column].iloc[0])
        if not value:
            yield column, float("nan"), mine, pd.isna(mine)
            continue
        digits = len(value.split(".")[1]) if "." in value else 0
        yield column, float(value), mine, round(mine, digits) == float(value)


def dgt(old: Path, new: Path) -> pd.DataFrame:
    """fig5.md's method rows against dgt_fig5.csv, each cell to the old table's printed precision."""
    after = pd.read_csv(new / "dgt_fig5.csv")
    out = []
    for dataset, header, cells in method_rows(old.read_text(), r"## (\w+) \("):
        base, _, harm = cells[0].partition(" + ")
        match = after[(after["preset"] == f"dgt_fig5_{dataset}") & (after["algo"] == base.lower())
                      & (after["algo/harmonizer"] == ("dgt" if harm else "none"))]
        out += [(dataset, cells[0], *c) for c in printed_cells(match, header, cells, DGT_COLUMNS)]
    return pd.DataFrame(out, columns=["dataset", "method", "cell", "old", "new", "equal"])


FSVRG_METHODS = {"MA-FSVRG": "mafsvrg", "GA-FSVRG": "gafsvrg", "FedProx": "fedprox", "PFedAvg": "perfedavg",
                 "SCAFFOLD": "scaffold", "MimeSVRG": "mimesvrg", "LoSAC (mechanism)": "losac",
                 "FSVRG (one model)": "fsvrg"}
FSVRG_READINGS = {"as printed": "fsvrg_as_printed", "centred seeds": "fsvrg_centred_seeds",
                  "Adam's step (eq. 64)": "fsvrg_adam", "both": "fsvrg_centred_adam",
                  "Adam's step, alpha_g / 4": "fsvrg_adam_quarter_alpha_g", "omega^j": "fsvrg_omega_round",
                  "K = two passes": "fsvrg_two_passes", "no central acceleration": "fsvrg_no_acceleration",
                  "groups = preferences": "fsvrg_preference_groups"}
# each section of figs_mnist.md: the new CSV, its value column, the grid key of the panel and how to read the panel
FSVRG_SECTIONS = {"Fig. 1": ("fsvrg_figs_mnist", "accuracy", "fl.clients_per_round",
                             lambda p: str(4 * int(p.split("%")[0]))),  # % of the 400 machines
                  "Fig. 8": ("fsvrg_fig8_mnist", "value", "algo.bank.threshold", lambda p: p.split("= ")[1]),
                  "Fig. 9": ("fsvrg_fig9_mnist", "value", "algo.bank.models", lambda p: p.split("= ")[1]),
                  "Fig. 10": ("fsvrg_fig10_mnist", "value", "algo.bank.beta1", lambda p: p.split("= ")[1]),
                  "open": ("fsvrg_open_mnist", "accuracy", "reading",
                           lambda p: next((r for k, r in FSVRG_READINGS.items() if p.startswith(k)), None))}


def fsvrg(old: Path, new: Path) -> pd.DataFrame:
    """figs_mnist.md's final test accuracy (a fraction, 4 decimals) per section, panel and method against the new
    CSVs (percent); the one-model reference rows of the open points are Fig. 1's, not a reading's, and are left out."""
    out, section = [], None
    for line in old.read_text().splitlines():
        if heading := re.match(r"## (Fig\. \d+): test_acc|## The points .* leaves? open", line):
            section = heading.group(1) or "open"
            continue
        if line.startswith("## "):
            section = None
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if section not in FSVRG_SECTIONS or len(cells) < 3 or cells[1] not in FSVRG_METHODS:
            continue
        name, column, key, read = FSVRG_SECTIONS[section]
        if not (new / f"{name}.csv").exists() or (section == "open" and cells[1] == "FSVRG (one model)"):
            continue
        after = pd.read_csv(new / f"{name}.csv", dtype={key: str})
        point = read(cells[0])
        match = after[(after["algo"] == FSVRG_METHODS[cells[1]]) & (after[key].map(_same(point)))]
        mine = float(match[column].iloc[0]) / 100 if len(match) else float("nan")
        out.append((section, cells[0], cells[1], float(cells[2]), mine, round(mine, 4) == float(cells[2])))
    return pd.DataFrame(out, columns=["figure", "panel", "method", "old", "new", "equal"])


GIFT_SCHEDULES = {"GIFT": "gift", "AFL": "afl", "AdaComm": "adacomm"}
GIFT_FIG6_COLUMNS = {"rounds": "rounds run", "best acc %": "best", "time to": "seconds_to_target"}


def gift_fig6(old: Path, new: Path) -> pd.DataFrame:
    """fig6.md's rows (one per setting and schedule) against gift_fig6.csv, each cell to the old table's printed
    precision; an empty cell (the target never reached) equals an empty one."""
    after = pd.read_csv(new / "gift_fig6.csv")
    out = []
    for setting, header, cells in method_rows(old.read_text(), r"## (\w+) - "):
        if cells[0] not in GIFT_SCHEDULES:
            continue
        match = after[(after["preset"] == f"gift_fig6_{setting}")
                      & (after["algo/schedule"] == GIFT_SCHEDULES[cells[0]])]
        out += [(setting, cells[0], *c) for c in printed_cells(match, header, cells, GIFT_FIG6_COLUMNS)]
    return pd.DataFrame(out, columns=["setting", "method", "cell", "old", "new", "equal"])


BHERD_MODELS = {"SVM-MNIST": "bherd_table2_svm", "RNN-IMDB": "bherd_table2_rnn", "CNN-CIFAR10": "bherd_table2_cnn"}
BHERD_ALGOS = {"Centralized SGD": "centralized", "FedAvg": "fedavg", "BHerd": "bherd", "GraB-FedAvg": "grab_fedavg",
               "FedNova": "fednova", "BHerd-FedNova": "bherd_fednova", "SCAFFOLD": "scaffold",
               "BHerd-SCAFFOLD": "bherd_scaffold", "FedDyn": "feddyn", "BHerd-FedDyn": "bherd_feddyn"}


def bherd_table2(old: Path, new: Path) -> pd.DataFrame:
    """table2.md's 'mean ± std' cells (Case 1 in the 4th column, Case 2 in the 7th) against bherd_table2.csv."""
    after = pd.read_csv(new / "bherd_table2.csv")
    out = []
    for line in old.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 7 or cells[0] not in BHERD_MODELS or cells[1] not in BHERD_ALGOS:
            continue
        for case, text in (("case1", cells[3]), ("case2", cells[6])):
            mean, _, std = text.partition(" ± ")
            match = after[(after["preset"] == BHERD_MODELS[cells[0]]) & (after["algo"] == BHERD_ALGOS[cells[1]])
                          & (after["partition"] == case)]
            mine = match[["value", "value_std"]].iloc[0].tolist() if len(match) else [float("nan")] * 2
            for cell, was, now in (("mean", mean, mine[0]), ("std", std, mine[1])):
                if was:
                    out.append((cells[0], cells[1], case, cell, float(was), now, round(now, 2) == float(was)))
    return pd.DataFrame(out, columns=["model", "algorithm", "case", "cell", "old", "new", "equal"])


NOT_VALUES = {"runs", "seeds", "rounds", "planned_rounds"}  # a table's bookkeeping columns, beside its values


def rerun(old: Path, new: Path) -> pd.DataFrame:
    """Two renderings of one fedrun-table artefact, cell by cell: the grid keys are the columns before ``runs``, the
    cells every other numeric column but the bookkeeping and the paper's numbers (``*_paper``, ``*_diff``)."""
    before, after = pd.read_csv(old), pd.read_csv(new)
    keys = list(before.columns[:list(before.columns).index("runs")])
    if list(after.columns[:len(keys)]) != keys:
        raise SystemExit(f"{new}'s grid keys are {list(after.columns[:len(keys)])}, {old}'s {keys}: not one artefact")
    cells = [c for c in before.select_dtypes("number").columns
             if c not in NOT_VALUES and c not in keys and not c.endswith(("_paper", "_diff")) and c in after]
    both = before.merge(after, on=keys, how="outer", suffixes=("_old", "_new"))  # a point one side lacks: unequal
    out = []
    for _, r in both.iterrows():
        for c in cells:
            was, now = r[f"{c}_old"], r[f"{c}_new"]
            equal = (pd.isna(was) and pd.isna(now)) or round(float(was), 2) == round(float(now), 2)
            out.append((*r[keys], c, was, now, bool(equal)))
    return pd.DataFrame(out, columns=[*keys, "cell", "old", "new", "equal"])


def _same(point: str):
    """Whether a CSV's grid value is ``point`` (0.0 and 0, 2 and 2.0 alike)."""
    def equal(value) -> bool:
        try:
            return float(value) == float(point)
        except (TypeError, ValueError):
            return str(value) == str(point)
    return equal


CHECKS = {  # what: (the comparison, the new tables' folder, the old table and how to get it)
    "fedgh": (fedgh, "results/fedgh", "tables.csv of scripts/fedgh_tables.py"),
    "bherd-sweeps": (bherd_sweeps, "results/bherd", "sweeps.md of scripts/bherd_sweeps.py: git show "
                                                    "1bb12da:results/bherd/sweeps.md > sweeps.md"),
    "dgt": (dgt, "results/dgt", "fig5.md of scripts/dgt_fig5.py: git show cb05113:results/dgt/fig5.md > fig5.md"),
    "fsvrg": (fsvrg, "results/fsvrg", "figs_mnist.md of scripts/fsvrg_figs.py: git show "
                                      "569f873:results/fsvrg/figs_mnist.md > figs_mnist.md"),
    "gift-fig6": (gift_fig6, "results/gift", "fig6.md of scripts/gift_figs.py: git show "
                                             "569f873:results/gift/fig6.md > fig6.md"),
    "bherd-table2": (bherd_table2, "results/bherd", "table2.md of scripts/bherd_table2.py: git show "
                                                    "569f873:results/bherd/table2.md > table2.md"),
    "rerun": (rerun, None, "an earlier rendering of the artefact: git show <commit>:results/<paper>/<artefact>.csv"),
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("what", choices=list(CHECKS))
    parser.add_argument("--old", default=None)
    parser.add_argument("--new", default=None)
    args = parser.parse_args(argv)
    compare, folder, old = CHECKS[args.what]
    if args.old is None:
        parser.error(f"{args.what} needs --old ({old})")
    if args.new is None and folder is None:
        parser.error(f"{args.what} needs --new (the artefact's CSV as rendered now)")
    cells = compare(Path(args.old), Path(args.new or folder))
    print(f"{int(cells['equal'].sum())} of {len(cells)} cells equal")
    gaps = (pd.to_numeric(cells["new"], errors="coerce") - pd.to_numeric(cells["old"], errors="coerce")).abs()
    if gaps.notna().any():
        print(f"largest difference: {gaps.max():.4g} ({cells.loc[gaps.idxmax(), 'cell']})")
    differing = cells[~cells["equal"]]
    if len(differing):
        print(differing.to_string(index=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
