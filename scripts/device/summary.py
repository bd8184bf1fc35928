"""The device kit's summary (scripts/device/check.sh): one table of its steps (exit status, seconds), the default
experiment's runs (process seconds, first round, later rounds, final accuracy), the limits bench's rounds per form
(with whether graphs replayed) and the sweeps' finished jobs.

    python scripts/device/summary.py WORK_FOLDER > summary.md
"""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path

from fedrun.bench.limits import gain, graphs, lever  # the limits table's own cells


def steps(work: Path) -> list[tuple[str, str, str]]:
    table = work / "steps.tsv"
    return [tuple(row) for row in csv.reader(table.open(), delimiter="\t")] if table.exists() else []


def run_row(run: Path) -> str:
    """First round's seconds, the later rounds' mean in ms and the final accuracy of a run folder."""
    metrics = run / "metrics.csv"
    if not metrics.exists():
        return "| | | |"
    rows = list(csv.DictReader(metrics.open()))
    if not rows:
        return "| | | |"
    t = [float(r["elapsed_s"]) for r in rows]
    later = f"{1e3 * (t[-1] - t[0]) / (len(t) - 1):.0f}" if len(t) > 1 else ""
    return f"| {t[0]:.2f} | {later} | {rows[-1]['test_acc']} |"


def finished_jobs(sweep: Path) -> tuple[int, int]:
    """(finished jobs, jobs with a summary) under a sweep folder."""
    states = [json.loads(p.read_text()).get("status") for p in sweep.rglob("summary.json")]
    return sum(s == "finished" for s in states), len(states)


def limits_rows(work: Path) -> list[str]:
    rows = []
    for path in sorted(work.glob("limits-*.json")):
        for r in json.loads(path.read_text()):
            rows.append(f"| {r['workload']} | {r['form']} | {r['precision']} | {lever(r)} | "
                        f"{r['round_s'] * 1e3:.1f} | {gain(r)} | {r['first_round_s']:.2f} | {r['peak_mem_mb']:.0f} | "
                        f"{graphs(r)} |")
    return rows


def main(work: Path) -> str:
    machine = (work / "machine.log").read_text().strip().splitlines() if (work / "machine.log").exists() else []
    out = [f"# Device kit: {machine[-1] if machine else '?'}", "",
           "| step | exit | seconds | first round s | later rounds ms (mean) | final test acc |",
           "|---|---|---|---|---|---|"]
    for name, rc, secs in steps(work):
        out.append(f"| {name} | {rc} | {secs} {run_row(work / 'runs' / name)}")
    if rows := limits_rows(work):
        out += ["", "| workload | form | precision | lever | round ms | lever's gain | first round s | peak MB | "
                "graphs captured / replayed / eager steps |", "|---|---|---|---|---|---|---|---|---|", *rows]
    sweeps = [(s.name, *finished_jobs(s)) for s in sorted((work / "sweeps").glob("*"))] \
        if (work / "sweeps").exists() else []
    if sweeps:
        out += ["", "| sweep | jobs finished | jobs with a summary |", "|---|---|---|",
                *[f"| {name} | {done} | {seen} |" for name, done, seen in sweeps]]
    out += ["", "Exit 124 or 137: the step ran past its limit; its log is in kit.tar.gz."]
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    sys.stdout.write(main(Path(sys.argv[1])))
