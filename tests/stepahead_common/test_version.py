"""The version stepahead reports is the installed distribution's."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

import pytest

from client import cli
from stepahead_common import version as version_module
from stepahead_common.version import package_version


def test_the_installed_distributions_version_is_reported():
    assert package_version() == version("stepahead") != "unknown"


def test_a_tree_never_installed_reports_unknown(monkeypatch):
    def missing(name: str) -> str:
        raise PackageNotFoundError(name)

    monkeypatch.setattr(version_module, "version", missing)
    assert package_version() == "unknown"


def test_the_cli_prints_it(capsys):
    with pytest.raises(SystemExit) as exited:
        cli.main(["--version"])
    assert exited.value.code == 0 and capsys.readouterr().out.strip() == f"stepahead {version('stepahead')}"
