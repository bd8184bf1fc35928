"""Two runs of ``python -m fedrun.bench.workloads`` side by side: each workload's auto executor time and GFLOP/s in
both, and their ratio, and each add-on's time (BHerd's herding, FedGH, DGT, GIFT's schedule) in both (issue #27's
targets are ratios over the starting commit, or over another setting such as ``--host-memory system``, which is
process-wide and so needs a bench run of its own).

    python scripts/bench/bench_ratio.py BASE.json THIS.json [--base-label L] [--this-label L] [--out FILE.md]

Both JSON files are the bench's ``--out``; the workloads both ran are compared. Take the two runs back to back on one
machine (the ratio is only as good as the machine's steadiness between them: the table shows both runs' matmul
peaks, and the add-on table both runs' training rounds, as a check).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def load(path: Path) -> dict[str, dict]:
    return {r["workload"]: r for r in json.loads(path.read_text()) if "auto_s" in r}


def load_addons(path: Path) -> dict[tuple[str, str], dict]:
    """(workload, add-on) -> the add-on workload's record."""
    return {(r["workload"], a): r for r in json.loads(path.read_text()) for a in r.get("addons", ())}


def describe(records: dict, path: Path) -> str:
    first = next(iter(records.values()))
    machine = first.get("machine", {})
    return (f"`{path.name}`: `{first.get('command', '?')}` at commit {str(machine.get('git_commit', '?'))[:7]} on "
            f"{machine.get('date', '?')}")


def table(base: dict, this: dict, base_label: str, this_label: str) -> str:
    rows = [f"| workload | {base_label} auto s | {this_label} auto s | speed-up | {base_label} GFLOP/s | "
            f"{this_label} GFLOP/s | matmul peak GFLOP/s ({base_label} / {this_label}) |",
            "|---|---|---|---|---|---|---|"]
    for name in (n for n in this if n in base):
        b, t = base[name], this[name]
        rows.append(f"| {name} | {b['auto_s']:.3f} | {t['auto_s']:.3f} | {b['auto_s'] / t['auto_s']:.2f}x | "
                    f"{b['gflops']:.2f} | {t['gflops']:.2f} | {b['matmul_peak_gflops']:.0f} / "
                    f"{t['matmul_peak_gflops']:.0f} |")
    return ("\n".join(rows) + "\n\nauto s = the round under the auto executor (best of the bench's repeats); "
            "speed-up = base / this.\n")


def addon_table(base: dict, this: dict, base_label: str, this_label: str) -> str:
    rows = [f"| workload | add-on | {base_label} s | {this_label} s | speed-up | {base_label} train s | "
            f"{this_label} train s |", "|---|---|---|---|---|---|---|"]
    for workload, addon in (key for key in this if key in base):
        b, t = base[workload, addon], this[workload, addon]
        rows.append(f"| {workload} | {addon} | {b[addon + '_s']:.4f} | {t[addon + '_s']:.4f} | "
                    f"{b[addon + '_s'] / t[addon + '_s']:.2f}x | {b['train_s']:.3f} | {t['train_s']:.3f} |")
    return ("\n".join(rows) + "\n\nadd-on s = the add-on on one round's output, train s = that round's local "
            "training (each the best of the bench's repeats); speed-up = base / this.\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("base", type=Path)
    parser.add_argument("this", type=Path)
    parser.add_argument("--base-label", default="base")
    parser.add_argument("--this-label", default="this")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    for path in (args.base, args.this):
        if not path.exists():
            parser.error(f"{path}: no such bench output; make one with `python -m fedrun.bench.workloads --out {path}`")
    base, this = load(args.base), load(args.this)
    base_addons, this_addons = load_addons(args.base), load_addons(args.this)
    shared, shared_addons = set(base) & set(this), set(base_addons) & set(this_addons)
    if not shared and not shared_addons:
        parser.error(f"{args.base} and {args.this} share no workload")
    command = "python scripts/bench/bench_ratio.py " + " ".join(argv if argv is not None else sys.argv[1:])
    tables = ([table(base, this, args.base_label, args.this_label)] if shared else []) + (
        [addon_table(base_addons, this_addons, args.base_label, args.this_label)] if shared_addons else [])
    text = (f"# fedrun.bench.workloads: {args.this_label} against {args.base_label}\n\nMade by `{command}` "
            f"from two bench runs taken back to back on one machine:\n\n"
            f"- {args.base_label}: {describe(base or base_addons, args.base)}\n"
            f"- {args.this_label}: {describe(this or this_addons, args.this)}\n\n" + "\n".join(tables))
    print(text)
    if args.out:
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
