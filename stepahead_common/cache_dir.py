"""Where stepahead keeps converted models, downloaded data and step profiles."""

from __future__ import annotations

import os
from pathlib import Path

CACHE_ENV_VAR = "STEPAHEAD_CACHE"


def stepahead_cache_dir(override: Path | None = None) -> Path:
    """The cache root: `override`, else $STEPAHEAD_CACHE, else ~/.cache/stepahead.

    The environment is read at call time, so tests and launchers may set it late.
    """
    if override is not None:
        return Path(override).expanduser()
    from_env = os.environ.get(CACHE_ENV_VAR)
    if from_env:
        return Path(from_env).expanduser()
    return Path.home() / ".cache" / "stepahead"
