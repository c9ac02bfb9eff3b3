"""`--generation-config` reaches the scheduler's config from `scheduler` and its environment variable, and `serve`
forwards it (default auto, as vLLM)."""

from __future__ import annotations

from client.cli import _build_parser
from client.env_defaults import resolve_env_defaults
from scheduler_svc.cli_args import scheduler_config_from_args, scheduler_flags

SCHEDULER = ["scheduler", "--executor", "127.0.0.1:1"]


def config_of(argv: list[str]):
    args = resolve_env_defaults(_build_parser().parse_args(argv))
    return scheduler_config_from_args(args, "m", args.executor, 0, "127.0.0.1")


def test_auto_by_default_none_or_a_directory_when_given(monkeypatch, tmp_path):
    assert config_of(SCHEDULER).generation_config == "auto"
    assert config_of([*SCHEDULER, "--generation-config", "none"]).generation_config == "none"
    monkeypatch.setenv("STEPAHEAD_GENERATION_CONFIG", str(tmp_path))
    assert config_of(SCHEDULER).generation_config == str(tmp_path)


def test_serve_forwards_it():
    flags = scheduler_flags(_build_parser().parse_args(["serve", "--generation-config", "none"]))
    assert flags[flags.index("--generation-config") + 1] == "none"
