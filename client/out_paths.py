"""Checks that a command's output place can be written before the command spends minutes measuring.

Benchmarks, soaks and profiles write their reports at the end; a typo in --out used to cost the whole run.
"""

from __future__ import annotations

import os
from pathlib import Path


def writable_dir(flag: str, directory: str | Path) -> Path:
    """``directory``, created if missing; ValueError naming ``flag`` when it cannot be created or written."""
    path = Path(directory)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise ValueError(f"{flag}: cannot create {directory} ({error.strerror or error})") from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise ValueError(f"{flag}: cannot write to {directory}")
    return path


def writable_file(flag: str, file: str | Path) -> Path:
    """``file``, its folder created if missing; ValueError naming ``flag`` when it cannot be written there."""
    path = Path(file)
    if path.is_dir():
        raise ValueError(f"{flag}: {file} is a directory, not a file")
    writable_dir(flag, path.parent)
    if path.exists() and not os.access(path, os.W_OK):
        raise ValueError(f"{flag}: cannot write to {file}")
    return path
