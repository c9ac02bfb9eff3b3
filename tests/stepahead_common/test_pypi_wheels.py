"""downloaded_wheel: a wheel already in the folder is used as it is; a failed download names the project."""

from __future__ import annotations

import pytest

from stepahead_common import pypi_wheels
from stepahead_common.pypi_wheels import downloaded_wheel


def refuse(*args, **kwargs):
    raise AssertionError("pip ran although the wheel was there")


def test_a_wheel_in_the_folder_is_used_without_pip(tmp_path, monkeypatch):
    wheel = tmp_path / "some_project-1.0-py3-none-any.whl"
    wheel.write_bytes(b"")
    monkeypatch.setattr(pypi_wheels.subprocess, "run", refuse)
    assert downloaded_wheel("some-project", "1.0", tmp_path) == wheel


def test_a_failed_download_names_the_project_and_quotes_pip(tmp_path, monkeypatch):
    class Failed:
        returncode, stdout, stderr = 1, "", "ERROR: No matching distribution found for some-project==9.9"

    monkeypatch.setattr(pypi_wheels.subprocess, "run", lambda *args, **kwargs: Failed())
    with pytest.raises(RuntimeError, match="(?s)some-project==9.9 from PyPI failed.*No matching distribution"):
        downloaded_wheel("some-project", "9.9", tmp_path / "data")


def test_a_download_that_leaves_no_wheel_is_an_error(tmp_path, monkeypatch):
    class Succeeded:
        returncode, stdout, stderr = 0, "", ""

    monkeypatch.setattr(pypi_wheels.subprocess, "run", lambda *args, **kwargs: Succeeded())
    with pytest.raises(RuntimeError, match="left no some_project-1.0-"):
        downloaded_wheel("some-project", "1.0", tmp_path)
