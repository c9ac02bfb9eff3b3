"""The README stays a user's page: short, every path it names exists, every `stepahead` command in it parses.

Running those commands for real is tests/stack/test_readme_commands.py.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import re

import pytest
from readme_commands import README, ROOT, repository_paths, shell_commands, stepahead_commands

from client import cli

# Directories commands write into (ignored by git), not expected in a fresh clone.
OUTPUTS = {"bench/out/", "bench/out"}
DOCS = [README, *sorted((ROOT / "docs").glob("*.md")), ROOT / "bench" / "README.md"]


def test_readme_is_at_most_about_250_lines():
    assert len(README.read_text().splitlines()) <= 250


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_repository_path_named_exists(doc):
    paths = repository_paths(doc)
    assert paths, "the page names no repository path at all: the extraction is broken"
    missing = [p for p in paths if p not in OUTPUTS and not any(ROOT.glob(p))]
    assert missing == []


def test_readme_commands_are_the_ones_expected():
    programs = {next(w for w in words if not re.fullmatch(r"[A-Z_]+=.*", w)) for words in shell_commands(README)}
    assert programs <= {"bash", "stepahead", "python3", "docker", "curl"}
    assert ["bash", ".ci/setup"] in shell_commands(README)
    assert ["python3", "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "2", "--dist", "loadscope",
            "--durations=25"] in shell_commands(README)
    assert ["serve"] in stepahead_commands(README)


@pytest.mark.parametrize("argv", stepahead_commands(README), ids=" ".join)
def test_every_stepahead_command_in_the_readme_parses(argv):
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        try:
            cli._build_parser().parse_args(argv)
        except SystemExit as exit_:
            pytest.fail(f"stepahead {' '.join(argv)} does not parse (exit {exit_.code}): {err.getvalue()}")


def test_every_flag_in_the_options_table_exists_on_serve():
    table = README.read_text().split("## Options that matter", 1)[1].split("\n## ", 1)[0]
    flags = set(re.findall(r"`(--[a-z-]+)`", table))
    assert len(flags) >= 10
    serve = next(
        action.choices["serve"]
        for action in cli._build_parser()._actions
        if isinstance(action, argparse._SubParsersAction)
    )
    known = {option for action in serve._actions for option in action.option_strings}
    assert flags - known == set()
