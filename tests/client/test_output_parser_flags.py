"""The HTTP front's output parsers, `--tool-call-parser` (tool_choice "auto") and `--reasoning-parser` (thinking split
from content): each reaches the scheduler's config from `scheduler` and its environment variable, `serve` forwards
it, and a value that is not a parser is refused naming it."""

from __future__ import annotations

import pytest
from cli_configs import SCHEDULER, scheduler_config_of

from client.cli import _build_parser
from scheduler_svc.cli_args import scheduler_flags
from scheduler_svc.config import SchedulerServiceConfig

PARSERS = [
    # (flag, config field, a valid value, the config's message for "xml")
    ("--tool-call-parser", "tool_call_parser", "hermes",
     "^tool_call_parser: must be one of hermes, llama3_json, pythonic, mistral, openai, got 'xml'$"),
    ("--reasoning-parser", "reasoning_parser", "qwen3",
     "^reasoning_parser: must be one of deepseek_r1, qwen3, openai_gptoss, got 'xml'$"),
]



@pytest.mark.parametrize(("flag", "field", "value", "refusal"), PARSERS)
def test_off_by_default_and_set_when_given(flag, field, value, refusal):
    assert getattr(scheduler_config_of(SCHEDULER), field) is None
    assert getattr(scheduler_config_of([*SCHEDULER, flag, value]), field) == value


@pytest.mark.parametrize(("flag", "field", "value", "refusal"), PARSERS)
def test_the_environment_sets_it(monkeypatch, flag, field, value, refusal):
    monkeypatch.setenv(f"STEPAHEAD_{field.upper()}", value)
    assert getattr(scheduler_config_of(SCHEDULER), field) == value


@pytest.mark.parametrize(("flag", "field", "value", "refusal"), PARSERS)
def test_serve_forwards_it_to_the_scheduler(flag, field, value, refusal):
    parser = _build_parser()
    assert flag not in scheduler_flags(parser.parse_args(["serve"]))
    flags = scheduler_flags(parser.parse_args(["serve", flag, value]))
    assert flags[flags.index(flag) + 1] == value


@pytest.mark.parametrize(("flag", "field", "value", "refusal"), PARSERS)
def test_another_parser_is_a_usage_error_naming_the_flag(capsys, flag, field, value, refusal):
    with pytest.raises(SystemExit) as exit_info:
        _build_parser().parse_args([*SCHEDULER, flag, "xml"])
    assert exit_info.value.code == 2
    assert f"argument {flag}: invalid choice: 'xml'" in capsys.readouterr().err


@pytest.mark.parametrize(("flag", "field", "value", "refusal"), PARSERS)
def test_the_config_refuses_an_unknown_parser_naming_the_field(flag, field, value, refusal):
    with pytest.raises(ValueError, match=refusal):
        SchedulerServiceConfig(model_dir="m", executor_addresses=("127.0.0.1:1",), **{field: "xml"})
