"""`--tool-call-parser` (tool_choice "auto" over HTTP) reaches the scheduler's config from `scheduler` and its
environment variable, `serve` forwards it, and a value that is not a parser is refused naming it."""

from __future__ import annotations

import pytest

from client.cli import _build_parser
from client.env_defaults import resolve_env_defaults
from scheduler_svc.cli_args import scheduler_config_from_args, scheduler_flags
from scheduler_svc.config import SchedulerServiceConfig

SCHEDULER = ["scheduler", "--executor", "127.0.0.1:1"]


def config_of(argv: list[str]) -> SchedulerServiceConfig:
    args = resolve_env_defaults(_build_parser().parse_args(argv))
    return scheduler_config_from_args(args, "m", args.executor, 0, "127.0.0.1")


def test_off_by_default_and_hermes_when_given():
    assert config_of(SCHEDULER).tool_call_parser is None
    assert config_of([*SCHEDULER, "--tool-call-parser", "hermes"]).tool_call_parser == "hermes"


def test_the_environment_sets_it(monkeypatch):
    monkeypatch.setenv("STEPAHEAD_TOOL_CALL_PARSER", "hermes")
    assert config_of(SCHEDULER).tool_call_parser == "hermes"


def test_serve_forwards_it_to_the_scheduler():
    parser = _build_parser()
    assert "--tool-call-parser" not in scheduler_flags(parser.parse_args(["serve"]))
    flags = scheduler_flags(parser.parse_args(["serve", "--tool-call-parser", "hermes"]))
    assert flags[flags.index("--tool-call-parser") + 1] == "hermes"


def test_another_parser_is_a_usage_error_naming_the_flag(capsys):
    with pytest.raises(SystemExit) as exit_info:
        _build_parser().parse_args([*SCHEDULER, "--tool-call-parser", "xml"])
    assert exit_info.value.code == 2
    assert "argument --tool-call-parser: invalid choice: 'xml'" in capsys.readouterr().err


def test_the_config_refuses_an_unknown_parser_naming_the_field():
    expected = "^tool_call_parser: must be one of hermes, llama3_json, pythonic, mistral, got 'xml'$"
    with pytest.raises(ValueError, match=expected):
        SchedulerServiceConfig(model_dir="m", executor_addresses=("127.0.0.1:1",), tool_call_parser="xml")
