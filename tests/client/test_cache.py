"""Tests of client/cache.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from client.cache import CACHE_ENV_VAR, stepahead_cache_dir


def test_override_wins(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(CACHE_ENV_VAR, str(tmp_path / "env"))
    assert stepahead_cache_dir(tmp_path / "given") == tmp_path / "given"


def test_environment_is_read_at_call_time(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(CACHE_ENV_VAR, str(tmp_path / "first"))
    assert stepahead_cache_dir() == tmp_path / "first"
    monkeypatch.setenv(CACHE_ENV_VAR, str(tmp_path / "second"))
    assert stepahead_cache_dir() == tmp_path / "second"


def test_home_default(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv(CACHE_ENV_VAR, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert stepahead_cache_dir() == tmp_path / ".cache" / "stepahead"
