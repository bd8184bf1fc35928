"""``fedrun-table``: a paper's table or figure, run as the sweep its presets define and summarised beside the paper's
own numbers (paper/<paper>.yaml).

    fedrun-table --list                                  # every artefact, its grid size and the data it needs
    fedrun-table bherd_fig5a [--seeds K] [overrides...]  # run the sweep (fedrun -m), then write the table
    fedrun-table bherd_fig5a hydra/launcher=slurm        # any Hydra launcher; finished jobs are skipped
    fedrun-table bherd_fig5a --collect-only              # summarise the runs that exist (a sweep run elsewhere)
    fedrun-table dgt_fig5 --seeds 5 --estimate           # how long the sweep would take here, from a few rounds
    fedrun-table bherd_svm_controls --confirm            # the claims' registered confirmatory seeds (1000 on)
    fedrun-table fsvrg_table1 repeats=3                  # a measured artefact: its function's settings

Each preset of the artefact runs as ``fedrun -m experiment=<preset> seed=0,..,K-1 <overrides>`` into
``<runs>/<artefact>/<preset>/`` (one folder per grid point, named by its values), so ``resume=true``, launchers and
skipping of finished jobs work as for any sweep; while a sweep runs, fedrun-table says every ten minutes how many of
its runs are complete, which are running (their rounds) and roughly how long it has left. The summary is
fedrun-report's (mean ± std over seeds), joined with the paper's numbers; rows whose data was absent (a fixture in the
dataset's format stood in) or whose runs were shortened are marked, and jobs that did not finish are listed under the
table. Writes ``<artefact>.md``, ``.csv`` and the figure (``.png``) beside the runs, into ``<runs>/<artefact>/``,
unless ``--out`` says where (the committed tables are in ``results/<paper>/``). A committed table (one git tracks) is
replaced only by one made with the same settings (rounds, seeds, the runs' commits) or with ``--replace``: a 5-round
check never passes for a paper's table.

Seeds 1000 and up are the confirmatory block: an artefact's claims are confirmed on its first seeds
(as many as they need), which ``--confirm`` runs and nothing else may (``--seeds``, a ``seed=`` override, and
``fedrun`` itself with a paper's preset refuse them), so that no exploration sees them before the claims are decided.

An artefact that is not a training run (a timing of the server's code, a centralised optimum) names the function
that measures it (fedrun/papers/measures); its ``key=value`` arguments are that function's settings, its rows are kept
in ``<runs>/<artefact>/measured.csv`` and summarised as runs are (mean ± std over its repeats).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

from fedrun.papers import measures
from fedrun.errors import FedrunError
from fedrun.config.overrides import override_key
from fedrun.papers.artefacts import (CONFIRMATORY_FROM, CONFIRMING, Artefact, artefacts, confirmatory_seeds, grid,
                                     in_block, is_sweep, outline, preset_config, seeds_given, tuning_seeds)
from fedrun.papers.table_summary import FIXTURE_FILE, SUMMARY_FILE, collect, write
from fedrun.rundir.files import commits_of
from fedrun.rundir.sweeps import sweep_progress


def sweep_command(preset: str, folder: Path, overrides: list[str]) -> list[str]:
    """``fedrun -m`` over the preset's grid into ``folder``, one subfolder per grid point named by its grid values
    and seed (other constant overrides left out of the name), so that a job keeps its folder however the grid
    grows."""
    axes = {*grid(preset), "seed"}
    constant = sorted({override_key(o) for o in overrides if not is_sweep(o) and not override_key(o).startswith("hydra")
                       and override_key(o) not in axes} | {"experiment"})
    return [sys.executable, "-m", "fedrun.cli", "-m", f"experiment={preset}", *overrides,
            f"hydra.sweep.dir={folder}", "hydra.sweep.subdir=${hydra.job.override_dirname}",
            f"hydra.job.config.override_dirname.exclude_keys=[{','.join(constant)}]"]


def _stand_in(preset: str, folder: Path, overrides: list[str], fixture_rounds: int) -> list[str]:
    """Overrides that point a preset whose dataset is absent at a fixture in the dataset's own file format (written
    once, under the sweep folder) for ``fixture_rounds`` rounds; the note goes to the folder's fixture.json."""
    from fedrun.data import DATASETS, resolve_root
    from fedrun.data.fixtures import stand_in

    cfg = preset_config(preset, overrides)
    spec = DATASETS[cfg.data.name]
    if spec.is_present(resolve_root(cfg.data.root)):
        if (folder / FIXTURE_FILE).exists():  # its finished fixture runs would pass for runs on the real data
            raise FedrunError(f"{folder} holds runs on a fixture of {cfg.data.name}, which is present now: move "
                              "that folder aside (or use another --runs) to run on the real data")
        return []
    clients = max(int(v) for v in grid(preset, overrides).get("fl.num_clients", [cfg.fl.num_clients]))
    extra, size = stand_in(cfg.data.name, folder / "fixture-data", clients)
    note = f"{cfg.data.name} absent: ran on a fixture of {size} for {fixture_rounds} rounds"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / FIXTURE_FILE).write_text(json.dumps({"dataset": cfg.data.name, "note": note}) + "\n")
    return [f"data.root={folder / 'fixture-data'}", *extra, f"fl.rounds={fixture_rounds}"]


def _stamps(folder: Path) -> dict[Path, int]:
    return {p: p.stat().st_mtime_ns for p in folder.rglob(SUMMARY_FILE)} if folder.exists() else {}


def _made(before: dict[Path, int], after: dict[Path, int]) -> tuple[int, int]:
    """The jobs a sweep wrote a summary for: (how many ran, how many were copied from an identical run under
    ``reuse``, whose summary names its source)."""
    changed = [p for p, t in after.items() if before.get(p) != t]
    copied = 0
    for path in changed:
        try:
            copied += "reused_from" in json.loads(path.read_text())
        except (OSError, ValueError):  # a job killed while writing it ran, as far as anyone can tell
            pass
    return len(changed) - copied, copied


WATCH_S = 600.0  # how often fedrun-table says where a running sweep is


def _watched(cmd: list[str], say) -> int:
    """Run the sweep's command, calling ``say`` every WATCH_S seconds while it runs; its exit status. A failed job is
    recorded in its folder (listed under the table). On Ctrl-C, which reaches the sweep too, it waits for the sweep's
    runs to write their checkpoints before stopping."""
    proc = subprocess.Popen(cmd)
    try:
        while True:
            try:
                return proc.wait(timeout=WATCH_S)
            except subprocess.TimeoutExpired:
                say()
    except KeyboardInterrupt:
        proc.wait()
        raise


def run(artefact: Artefact, runs: Path, overrides: list[str], fixture_rounds: int, log=print) -> tuple[int, int]:
    """Run every preset's sweep (or the artefact's measurement); returns how many jobs ran and how many were copied
    from identical runs (finished jobs are skipped by fedrun itself)."""
    if artefact.measure:
        return measures.run(artefact, runs / artefact.name, overrides, log), 0
    ran = copied = 0
    runs.mkdir(parents=True, exist_ok=True)  # a job copies an identical run of another artefact from under it
    shared = [] if any(override_key(o) == "reuse" for o in overrides) else [f"reuse={runs.resolve()}"]
    for preset in artefact.presets:
        folder = runs / (artefact.runs_of or artefact.name) / preset
        extra = _stand_in(preset, folder, overrides, fixture_rounds)
        before = _stamps(folder)
        cmd = sweep_command(preset, folder, [*overrides, *extra, *shared])
        log(f"fedrun-table: {' '.join(cmd[2:])}")
        axes = grid(preset, [*overrides, *extra])
        returncode = _watched(cmd, lambda: log(f"fedrun-table: {preset}: {sweep_progress(folder, axes)}"))
        if returncode == 2:  # refused before any job ran: a bad override, said above by fedrun itself
            raise FedrunError(f"fedrun refused the sweep of {preset} (its message is above); nothing ran")
        ran_here, copied_here = _made(before, _stamps(folder))
        ran, copied = ran + ran_here, copied + copied_here
    return ran, copied


def listing() -> str:
    from fedrun.data import DATASETS, resolve_root

    lines = ["| artefact | paper | source | jobs per seed | data (present here?) |", "|---|---|---|---|---|"]
    for name, (paper, a) in artefacts().items():
        if a.measure:
            data = [f"{d} ({'yes' if DATASETS[d].is_present(resolve_root(None)) else 'no'})" for d in a.data]
            lines.append(f"| {name} | {paper.cite} | {a.source} | measured by {a.measure} | "
                         f"{', '.join(data) or 'none'} |")
            continue
        size, data = 0, []
        for preset in a.presets:
            axes, dataset = outline(preset)  # read, not composed: a listing of every artefact in a second
            n = 1
            for values in axes.values():
                n *= len(values)
            size += n
            present = DATASETS[dataset].is_present(resolve_root(None))
            data.append(f"{dataset} ({'yes' if present else 'no: a fixture stands in'})")
        shared = f" (the runs of {a.runs_of})" if a.runs_of else ""
        lines.append(f"| {name} | {paper.cite} | {a.source} | {size}{shared} | {', '.join(dict.fromkeys(data))} |")
    return "\n".join(lines)


def tracks_files(folder: Path) -> bool:
    """Whether git tracks files in ``folder`` (results/<paper>: where committed tables live)."""
    if not folder.is_dir():
        return False
    listed = subprocess.run(["git", "-C", str(folder), "ls-files", "."], capture_output=True, text=True)
    return listed.returncode == 0 and bool(listed.stdout.strip())


def mixed_commits(found) -> list[str]:
    """Why ``found``'s runs are not all made at one clean commit (a committed table's rule): the commits they were
    made at when there are several, those with uncommitted changes (``-dirty``) and runs that record none."""
    made = [commits_of(summary) for summary in found.get("summary", []) if summary]
    commits = sorted({c for cs in made for c in cs})
    problems = []
    if len(commits) > 1:
        problems.append(f"made at {len(commits)} commits ({', '.join(commits)})")
    dirty = [c for c in commits if c.endswith("-dirty")]
    if dirty:
        problems.append(f"with uncommitted changes ({', '.join(dirty)})")
    unknown = sum(1 for cs in made if not cs)
    if unknown:
        problems.append(f"{unknown} run(s) record no commit")
    return problems


def committed_table_differs(out: Path, name: str, found) -> list[str]:
    """How the table ``found``'s runs would make differs from the committed one (tracked by git) at
    ``<out>/<name>.md``: its rounds, seeds and the runs' commits, each as ``what: there, here``; empty when there is
    no committed table there or it was made with the same settings."""
    import re

    import pandas as pd

    table = out / f"{name}.md"
    if not table.exists():
        return []
    tracked = subprocess.run(["git", "-C", str(out), "ls-files", "--error-unmatch", table.name], capture_output=True)
    if tracked.returncode != 0:
        return []
    text = table.read_text()
    seeds = re.search(r"over (?:seeds|repeats) (\[[^\]]*\]|–)", text)
    commits = re.search(r"made at commit ([^;]+);", text)
    csv = pd.read_csv(out / f"{name}.csv") if (out / f"{name}.csv").exists() else pd.DataFrame()
    rounds = sorted({int(r) for r in csv["rounds"].dropna()}) if "rounds" in csv else None
    here_seeds = str(sorted({int(v) for v in found["seed"].dropna()}) or "–")
    here_rounds = sorted({int(r) for r in found["rounds"].dropna()}) if "rounds" in found else None
    made = {c for summary in found.get("summary", []) if summary for c in commits_of(summary)}
    here_commits = ", ".join(sorted(made)) or "unknown"
    differences = []
    if rounds is not None and rounds != here_rounds:
        differences.append(f"rounds: {rounds} there, {here_rounds} here")
    if seeds and seeds.group(1) != here_seeds:
        differences.append(f"seeds: {seeds.group(1)} there, {here_seeds} here")
    if commits and commits.group(1).strip() != here_commits:
        differences.append(f"runs' commits: {commits.group(1).strip()} there, {here_commits} here")
    return differences


def print_estimate(artefact: Artefact, overrides: list[str], command: str) -> int:
    import torch

    from fedrun.papers.estimate import estimate, markdown
    from fedrun.rundir.files import device_name, git_commit

    try:
        found = estimate(artefact, overrides, say=lambda line: print(f"fedrun-table: {line}", file=sys.stderr,
                                                                      flush=True))
    except FedrunError as e:
        print(f"fedrun-table: {e}", file=sys.stderr)
        return 2
    print(markdown(artefact, found, device_name(torch.device("cuda" if torch.cuda.is_available() else "cpu")),
                   command, git_commit() or "unknown"))
    return 0


def seeds_refused(artefact: Artefact, overrides: list[str], seeds: int | None, confirm: bool) -> str | None:
    """Why the seeds asked of ``artefact`` are refused: ``--confirm`` with seeds of its own, or for an artefact
    without claims; exploration (``--seeds``, ``seed=``) reaching into the confirmatory block."""
    given = seeds_given(overrides)
    if confirm:
        if seeds is not None or given:
            return "--confirm runs the registered confirmatory seeds: give no --seeds and no seed="
        if not confirmatory_seeds(artefact):
            return f"--confirm: {artefact.name} makes no claim, so it has no confirmatory seeds"
        return None
    blocked = in_block([*given, *range(seeds or 0)])
    if blocked:
        return (f"seeds {blocked[0]}..{blocked[-1]} are in the confirmatory block ({CONFIRMATORY_FROM} and up), which "
                f"the claims' registrations reserve: explore with seeds below {CONFIRMATORY_FROM}, or run the "
                f"registered ones with --confirm")
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="fedrun-table", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("artefact", nargs="?", help="an artefact's name (fedrun-table --list names them)")
    parser.add_argument("overrides", nargs="*", help="Hydra overrides for every job (a launcher, fl.rounds=..., "
                                                     "resume=true, a sweep of your own: key=a,b)")
    parser.add_argument("--list", action="store_true", help="name every artefact, its grid size and its data")
    parser.add_argument("--seeds", type=int, default=None, help="seeds 0..K-1 per grid point (exploration; 1 by "
                                                                 "default)")
    parser.add_argument("--confirm", action="store_true", help="run the seeds the artefact's claims are confirmed on "
                                                               "(the confirmatory block, 1000 on), which nothing "
                                                               "else may run")
    parser.add_argument("--presets", default=None, help="only these of the artefact's presets (comma-separated)")
    parser.add_argument("--collect-only", action="store_true", help="summarise the runs under --runs; run nothing")
    parser.add_argument("--estimate", action="store_true", help="say how long the sweep would take on this machine, "
                                                                "from 3 rounds of each preset's first job; run "
                                                                "nothing else")
    parser.add_argument("--fixture-rounds", type=int, default=2, help="rounds of a job whose data is absent")
    parser.add_argument("--runs", default="outputs/tables", help="the sweeps' folder (<runs>/<artefact>/<preset>)")
    parser.add_argument("--out", default=None, help="where the table goes (default: <runs>/<artefact>, beside its "
                                                     "runs; results/<paper> holds the committed tables)")
    parser.add_argument("--replace", action="store_true", help="replace a committed table in --out even when it was "
                                                               "made with other settings (rounds, seeds, commits)")
    parser.add_argument("--mixed-commits", action="store_true", help="write into a folder of committed tables "
                                                                     "(results/) from runs of several commits or with "
                                                                     "uncommitted changes (refused by default)")
    args = parser.parse_intermixed_args(argv)  # options and overrides in any order
    if args.list:
        print(listing())
        return 0
    known = artefacts()
    if args.artefact is None:
        parser.error("name an artefact (fedrun-table --list names them)")
    if args.artefact not in known:
        from fedrun.config.overrides import nearest

        parser.error(f"unknown artefact {args.artefact!r}.{nearest(str(args.artefact), known)} "
                     "fedrun-table --list names them")
    paper, artefact = known[args.artefact]
    if artefact.measure and (args.seeds is not None or args.presets or args.estimate or args.confirm):
        parser.error(f"{artefact.name} is measured by {artefact.measure}, not swept: it has no seeds or presets; "
                     "give its settings as key=value (repeats=5); it has no rounds to estimate")
    if args.presets:
        chosen = [p.strip() for p in args.presets.split(",")]
        unknown = [p for p in chosen if p not in artefact.presets]
        if unknown:
            parser.error(f"--presets {','.join(unknown)}: not a preset of {artefact.name}; its presets: "
                         f"{','.join(artefact.presets)}")
        artefact = replace(artefact, presets=tuple(chosen))
    overrides = list(args.overrides)
    refused = seeds_refused(artefact, overrides, args.seeds, args.confirm)
    if refused:
        parser.error(refused)
    # the seed is named in every job's folder, so more seeds add folders (a measured artefact has repeats instead)
    if args.confirm:
        # a tuned claim's values are picked on the tuning seeds, then tested on the confirmatory ones
        overrides.append("seed=" + ",".join(map(str, tuning_seeds(artefact) + confirmatory_seeds(artefact))))
        os.environ[CONFIRMING] = "1"  # the sweeps it starts may run the block (fedrun refuses it to others)
    elif not artefact.measure and not any(override_key(o) == "seed" for o in overrides):
        overrides.append("seed=" + ",".join(map(str, range(args.seeds or 1))))
    command = "fedrun-table " + " ".join(argv if argv is not None else sys.argv[1:])
    if args.estimate:
        return print_estimate(artefact, overrides, command)
    runs = Path(args.runs)
    if not args.collect_only:
        try:
            ran, copied = run(artefact, runs, overrides, args.fixture_rounds)
        except FedrunError as e:
            print(f"fedrun-table: {e}", file=sys.stderr)
            return 2
        except KeyboardInterrupt:  # the sweep's runs have written their checkpoints (_watched)
            print(f"fedrun-table: stopped; the same command with resume=true continues each unfinished run from its "
                  f"checkpoint, and `fedrun-table {artefact.name} --collect-only --runs {runs}` tables what finished",
                  file=sys.stderr)
            return 130
        print(f"fedrun-table: {ran} job(s) ran" + (f", {copied} copied from identical runs under {runs} (reuse)"
                                                    if copied else ""))
    found = collect(artefact, runs)
    if found.empty:
        print(f"fedrun-table: no runs of {artefact.name} under {runs / artefact.name}", file=sys.stderr)
        return 2
    out = Path(args.out) if args.out else runs / artefact.name
    mixed = [] if args.mixed_commits or not tracks_files(out) else mixed_commits(found)
    if mixed:
        print(f"fedrun-table: {out} holds committed tables, whose runs are made at one clean commit; these runs are "
              f"{'; '.join(mixed)}. Run them again at one commit (commit your changes first), write the table "
              f"elsewhere (--out DIR), or add --mixed-commits to write it anyway (its header names the commits)",
              file=sys.stderr)
        return 2
    differs = [] if args.replace else committed_table_differs(out, artefact.name, found)
    if differs:
        print(f"fedrun-table: {out / artefact.name}.md is a committed table made with other settings "
              f"({'; '.join(differs)}); it is left as it is. Write this one elsewhere (--out DIR; by default it goes "
              f"beside its runs, {runs / artefact.name}), or add --replace to replace it (git keeps the old one)",
              file=sys.stderr)
        return 2
    path = write(paper, artefact, found, out, command)
    print(path.read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
