"""A lock per cache entry, shared by every process on the machine, for work that should run once."""

from __future__ import annotations

import hashlib
import tempfile
from pathlib import Path

from filelock import FileLock


def cache_entry_lock(entry: Path) -> FileLock:
    """An inter-process lock for ``entry`` (a converted model dir, a profile file). The lock file lives in the
    temp dir, keyed by the entry's absolute path, so the cache holds only finished entries. Not thread-local:
    async code may acquire it in a worker thread and release it on the event loop."""
    key = hashlib.sha256(str(Path(entry).expanduser().resolve()).encode()).hexdigest()[:16]
    return FileLock(str(Path(tempfile.gettempdir()) / f"stepahead-{key}.lock"), thread_local=False)
