"""The default test suite's time and coverage, at this commit and at a baseline, on clean clones: what the README's
test line and docs/development.md cite.

    python scripts/bench/suite_time.py                          # time the default suite at HEAD
    python scripts/bench/suite_time.py --baseline bcd1a0b       # and at that commit, in the same session (a ratio)
    python scripts/bench/suite_time.py --baseline bcd1a0b --coverage    # and each one's line and branch coverage

Each commit is cloned into a temporary folder and its suite run there by this checkout's interpreter (``.venv``),
with the clone first on the import path, so each measures its own code and tests with the same packages. The time is
pytest's own (``N passed ... in X s``), of ``pytest -q`` with the options of each commit's own ``make test`` recipe
(at HEAD, xdist's workers), one commit after another, nothing else running. Coverage is coverage.py's line and branch
coverage of ``fedrun/``, CLI subprocesses included, measured the same way at both commits (one rc file given to both,
the per-test time budget off, two xdist workers: a coverage figure does not depend on time); its runs come after the
timed ones. The figures go to results/newcomer/test-suite-cpu.json (read by scripts/repo/readme_blocks.py) and .md.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
OUT = REPO / "results" / "newcomer" / "test-suite-cpu.json"
COVERAGE_RC = """[run]
source = fedrun
branch = true
patch = subprocess, _exit
[report]
skip_empty = true
"""


def clone(commit: str, into: Path) -> Path:
    subprocess.run(["git", "clone", "-q", "--no-hardlinks", str(REPO), str(into)], check=True)
    subprocess.run(["git", "-C", str(into), "checkout", "-q", commit], check=True)
    return into


def make_test_args(tree: Path) -> list[str]:
    """The pytest options of the tree's own ``make test`` (its Makefile's recipe), so that each commit's suite is
    timed as its ``make test`` ran it (``--durations`` left out: it only prints)."""
    recipe = re.search(r"^test:.*\n((?:\t.*\n)+)", (tree / "Makefile").read_text(), re.M).group(1)
    words = shlex.split(re.search(r"-m pytest (.*)", recipe).group(1))
    return [w for w in words if w != "-q" and not w.startswith("--durations")]


def pytest_in(tree: Path, *args: str, env: dict | None = None) -> tuple[str, float]:
    """Run the tree's default suite: its closing line and the wall time it took."""
    env = {**os.environ, "PYTHONPATH": str(tree), **(env or {})}
    started = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args], cwd=tree, env=env,
                          capture_output=True, text=True)
    took = time.perf_counter() - started
    closing = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else ""
    if proc.returncode != 0:
        raise SystemExit(f"the suite failed in {tree} ({proc.returncode}): {closing}\n{proc.stdout[-3000:]}")
    return closing, took


def pytest_seconds(closing: str) -> float:
    """pytest's own time from its closing line ('966 passed, 24 skipped in 536.67s (0:08:56)')."""
    return float(re.search(r" in ([0-9.]+)s", closing).group(1))


def coverage_of(tree: Path, work: Path) -> dict:
    rc = work / "coveragerc"
    rc.write_text(COVERAGE_RC)
    report = work / f"coverage-{tree.name}.json"
    pytest_in(tree, "-n", "2", f"--cov-config={rc}", "--cov", "--cov-report=", f"--cov-report=json:{report}",
              env={"FEDRUN_TEST_BUDGET_S": "0"})
    totals = json.loads(report.read_text())["totals"]
    return {"line": 100 * totals["covered_lines"] / totals["num_statements"],
            "branch": 100 * totals["covered_branches"] / totals["num_branches"],
            "combined": totals["percent_covered"], "statements": totals["num_statements"],
            "branches": totals["num_branches"]}


def measure(commits: dict[str, str], coverage: bool) -> dict:
    from fedrun.rundir.files import cpu_model

    out = {}
    with tempfile.TemporaryDirectory() as work:
        trees = {name: clone(commit, Path(work) / name) for name, commit in commits.items()}
        for name, tree in trees.items():
            closing, wall = pytest_in(tree, *make_test_args(tree))
            sha = subprocess.run(["git", "-C", str(tree), "rev-parse", "HEAD"], capture_output=True, text=True,
                                 check=True).stdout.strip()
            out[name] = {"commit": sha, "closing": closing, "pytest_s": pytest_seconds(closing), "wall_s": wall,
                         "options": " ".join(make_test_args(tree))}
            print(f"{name} ({sha[:7]}): {closing}", file=sys.stderr)
        if coverage:
            for name, tree in trees.items():
                out[name]["coverage"] = coverage_of(tree, Path(work))
                print(f"{name}: coverage {out[name]['coverage']}", file=sys.stderr)
    argv = " ".join(sys.argv[1:])
    return {"runs": out, "machine": f"{cpu_model()}, {os.cpu_count()} cores", "date": time.strftime("%Y-%m-%d"),
            "command": f"python scripts/bench/suite_time.py {argv}".strip()}


def write(m: dict) -> None:
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(m, indent=2) + "\n")
    rows = []
    for name, r in m["runs"].items():
        cov = r.get("coverage")
        cells = f"{cov['line']:.2f}% | {cov['branch']:.2f}%" if cov else "– | –"
        rows.append(f"| {name} | {r['commit'][:7]} | {r['pytest_s']:.0f} s ({r['pytest_s'] / 60:.1f} min) | "
                    f"{r['closing']} | {cells} |")
    ratio = ""
    if "baseline" in m["runs"] and "head" in m["runs"]:
        share = m["runs"]["head"]["pytest_s"] / m["runs"]["baseline"]["pytest_s"]
        kept = m["runs"]["baseline"].get("measured_by")
        when = (f"the baseline's figure kept from `{kept}` on this machine" if kept else
                "both measured in this one session")
        ratio = f"\n\nThe suite at HEAD takes {share:.2f}x the baseline's time, {when}."
    OUT.with_suffix(".md").write_text(
        f"# The default test suite, timed\n\nMade by `{m['command']}` on {m['date']}, on {m['machine']}: each commit's "
        "`pytest -q` (the default suite, as `make test` runs it after ruff) on a clean clone, MNIST already fetched, "
        "one after another with nothing else running; pytest's own time. Coverage: coverage.py's line and branch "
        "coverage of `fedrun/`, CLI subprocesses included (`make coverage` measures the same on a checkout).\n\n"
        "| suite | commit | pytest's time | pytest's closing line | line coverage | branch coverage |\n"
        f"|---|---|---|---|---|---|\n" + "\n".join(rows) + ratio + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--baseline", help="a commit to measure beside HEAD")
    parser.add_argument("--coverage", action="store_true", help="also each one's line and branch coverage")
    parser.add_argument("--keep-baseline", action="store_true",
                        help="time HEAD only, keeping the baseline's figure of the committed table when it was "
                             "measured on this machine (its suite does not change)")
    args = parser.parse_args(argv)
    if args.keep_baseline:
        from fedrun.rundir.files import cpu_model

        before = json.loads(OUT.read_text())
        if "baseline" not in before["runs"] or before["machine"] != f"{cpu_model()}, {os.cpu_count()} cores":
            parser.error(f"--keep-baseline: {OUT} holds no baseline measured on this machine; use --baseline")
        m = measure({"head": "HEAD"}, args.coverage)
        baseline = before["runs"]["baseline"] | {"measured_by": f"{before['command']}, {before['date']}"}
        write(m | {"runs": {"baseline": baseline, **m["runs"]}})
        return 0
    commits = {**({"baseline": args.baseline} if args.baseline else {}), "head": "HEAD"}
    write(measure(commits, args.coverage))
    return 0


if __name__ == "__main__":
    sys.exit(main())
