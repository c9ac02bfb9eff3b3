"""`--generation-config` reaches the scheduler's config from `scheduler` and its environment variable, and `serve`
forwards it (default auto, as vLLM)."""

from __future__ import annotations

from cli_configs import SCHEDULER, scheduler_config_of

from client.cli import _build_parser
from scheduler_svc.cli_args import scheduler_flags


def test_auto_by_default_none_or_a_directory_when_given(monkeypatch, tmp_path):
    assert scheduler_config_of(SCHEDULER).generation_config == "auto"
    assert scheduler_config_of([*SCHEDULER, "--generation-config", "none"]).generation_config == "none"
    monkeypatch.setenv("STEPAHEAD_GENERATION_CONFIG", str(tmp_path))
    assert scheduler_config_of(SCHEDULER).generation_config == str(tmp_path)


def test_serve_forwards_it():
    flags = scheduler_flags(_build_parser().parse_args(["serve", "--generation-config", "none"]))
    assert flags[flags.index("--generation-config") + 1] == "none"
