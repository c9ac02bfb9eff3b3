"""Reading the commands, code and paths out of the README (and the docs it points to)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
_FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)
_BACKTICKED = re.compile(r"`([^`\s]+)`")


def fenced_blocks(path: Path, language: str) -> list[str]:
    """The bodies of the fenced code blocks tagged ``language``."""
    return [body for lang, body in _FENCE.findall(path.read_text()) if lang == language]


def shell_commands(path: Path) -> list[list[str]]:
    """Every command line of the bash blocks, split like the shell would (comments dropped), one per `&&` part."""
    commands = []
    for block in fenced_blocks(path, "bash"):
        for line in block.splitlines():
            words = shlex.split(line, comments=True)
            part: list[str] = []
            for word in [*words, "&&"]:
                if word == "&&":
                    if part:
                        commands.append(part)
                    part = []
                else:
                    part.append(word)
    return commands


def stepahead_commands(path: Path) -> list[list[str]]:
    """The `stepahead ...` commands of the bash blocks (environment assignments in front dropped), as argv."""
    found = []
    for words in shell_commands(path):
        while words and re.fullmatch(r"[A-Z_]+=.*", words[0]):
            words = words[1:]
        if words and words[0] == "stepahead":
            found.append(words[1:])
    return found


def repository_paths(path: Path) -> list[str]:
    """Backticked words that look like paths inside the repository (a known top-level name, or a file name)."""
    top_level = {p.name for p in ROOT.iterdir()}
    paths = []
    for word in _BACKTICKED.findall(path.read_text()):
        head = word.split("/")[0]
        if head in top_level and ("/" in word or "." in word):
            paths.append(word)
    return paths
