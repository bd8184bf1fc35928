"""The documentation builds without a warning (``make docs``: mkdocs in strict mode) and every link of README.md
and docs/ leads somewhere: a file of the repository, and a heading of it where the link names one."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
from conftest import REPO

LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.S | re.M)


def anchors(markdown: str) -> set[str]:
    """The ids of a Markdown file's headings, as mkdocs' toc extension makes them (lower case, punctuation dropped,
    spaces as hyphens)."""
    out = set()
    for line in FENCE.sub("", markdown).splitlines():
        if m := re.match(r"^#{1,6} (.*)$", line):
            text = re.sub(r"[`*_]", "", m.group(1)).strip().lower()
            out.add(re.sub(r"[\s]+", "-", re.sub(r"[^\w\s-]", "", text)))
    return out


def broken_links(path) -> list[str]:
    text = FENCE.sub("", path.read_text())
    problems = []
    for target in LINK.findall(text):
        if re.match(r"^[a-z]+:", target):  # http(s), mailto: not checked offline
            continue
        file, _, anchor = target.partition("#")
        dest = (path.parent / file).resolve() if file else path
        if not dest.exists():
            problems.append(f"{path.relative_to(REPO)}: {target} (no such file)")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest.read_text()):
            problems.append(f"{path.relative_to(REPO)}: {target} (no such heading)")
    return problems


def test_every_link_of_the_readme_and_the_docs_leads_somewhere():
    pages = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
    assert len(pages) > 5
    assert [problem for p in pages for problem in broken_links(p)] == []


def test_the_link_check_finds_a_missing_file_and_a_missing_heading(tmp_path, monkeypatch):
    monkeypatch.setattr(sys.modules[__name__], "REPO", tmp_path)
    (tmp_path / "b.md").write_text("# Title\n\n## A section: `here`\n")
    page = tmp_path / "a.md"
    page.write_text("[ok](b.md#a-section-here) [gone](c.md) [no](b.md#elsewhere) [self](#title)\n"
                    "```\n[in a fence](nowhere.md)\n```\n# Title\n")
    assert broken_links(page) == ["a.md: c.md (no such file)", "a.md: b.md#elsewhere (no such heading)"]


def test_the_docs_build_without_warnings(tmp_path):
    pytest.importorskip("mkdocs", reason="the docs extra: pip install -e '.[docs]' (make setup installs it)")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-d", str(tmp_path / "site")],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (tmp_path / "site" / "adding-a-part" / "index.html").exists()


def test_the_readme_stays_short():
    assert len((REPO / "README.md").read_text().splitlines()) <= 250


# what a README command's comment names, and the composed config's part that runs it
NAMED_PARTS = {"BHerd": ("step_selector", "herd"), "FedGH": ("harmonizer", "fedgh"), "GIFT": ("schedule", "gift")}


def readme_commands() -> list[tuple[list[str], str]]:
    """The README's single-run ``fedrun`` commands (overrides, comment), as its code blocks give them."""
    import shlex

    out = []
    for block in FENCE.findall((REPO / "README.md").read_text()):
        for line in block.splitlines():
            command, _, comment = line.partition("#")
            words = shlex.split(command)
            if words[:1] == ["fedrun"] and not any(w.startswith("-") for w in words):
                out.append((words[1:], comment))
    return out


def test_each_readme_command_runs_the_method_its_comment_names():
    from fedrun.config.compose import compose_config

    commands = readme_commands()
    assert any("BHerd" in comment for _, comment in commands)
    for overrides, comment in commands:
        cfg = compose_config(overrides)  # composes: every key and option of the line exists
        for method, (part, name) in NAMED_PARTS.items():
            if method in comment:
                assert cfg.algo[part].name == name, (overrides, comment)


def test_the_plug_points_examples_run():
    """The runnable examples in the plug points' docstrings (a toy local rule, the fixed schedule, BHerd's step
    selection, FedGH, the mean aggregator, the server's SGD, the bank's preferred models) give what they show."""
    import doctest

    import fedrun.algorithms.bank.bank
    import fedrun.algorithms.base

    result = doctest.testmod(fedrun.algorithms.base)
    assert result.failed == 0 and result.attempted >= 22
    bank = doctest.testmod(fedrun.algorithms.bank.bank)
    assert bank.failed == 0 and bank.attempted >= 5
