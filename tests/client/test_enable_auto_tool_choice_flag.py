"""`--enable-auto-tool-choice` (vLLM's flag) is accepted so vLLM command lines run: with `--tool-call-parser` it changes
nothing (the parser alone serves tool_choice "auto" here), `serve` forwards it, its variable sets it, and without a
parser it is refused naming it, as vLLM refuses it."""

from __future__ import annotations

import pytest
from cli_configs import SCHEDULER, scheduler_config_of

from client.cli import _build_parser
from scheduler_svc.cli_args import scheduler_flags


def test_it_is_accepted_with_a_parser_and_forwarded(monkeypatch):
    config = scheduler_config_of([*SCHEDULER, "--enable-auto-tool-choice", "--tool-call-parser", "hermes"])
    assert config.enable_auto_tool_choice and config.tool_call_parser == "hermes"
    monkeypatch.setenv("STEPAHEAD_ENABLE_AUTO_TOOL_CHOICE", "true")
    assert scheduler_config_of([*SCHEDULER, "--tool-call-parser", "hermes"]).enable_auto_tool_choice
    monkeypatch.delenv("STEPAHEAD_ENABLE_AUTO_TOOL_CHOICE")
    parser = _build_parser()
    assert "--enable-auto-tool-choice" not in scheduler_flags(parser.parse_args(["serve"]))
    flags = scheduler_flags(parser.parse_args(["serve", "--enable-auto-tool-choice", "--tool-call-parser", "hermes"]))
    assert "--enable-auto-tool-choice" in flags


def test_without_a_parser_it_is_refused_naming_it():
    with pytest.raises(ValueError, match="^enable_auto_tool_choice: needs --tool-call-parser"):
        scheduler_config_of([*SCHEDULER, "--enable-auto-tool-choice"])
