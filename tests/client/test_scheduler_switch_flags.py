"""The scheduler's on/off flags from vLLM (`--enable-force-include-usage`, `--metrics-vllm-names`): each reaches the
scheduler's config from `scheduler` and from its environment variable, and `serve` forwards it."""

from __future__ import annotations

import pytest
from cli_configs import SCHEDULER, scheduler_config_of

from client.cli import _build_parser
from scheduler_svc.cli_args import scheduler_flags


@pytest.mark.parametrize(("flag", "field"), [("--enable-force-include-usage", "enable_force_include_usage"),
                                             ("--metrics-vllm-names", "metrics_vllm_names")])
def test_the_flag_and_its_variable_turn_it_on_and_serve_forwards_it(monkeypatch, flag, field):
    assert not getattr(scheduler_config_of(SCHEDULER), field)
    assert getattr(scheduler_config_of([*SCHEDULER, flag]), field)
    variable = "STEPAHEAD_" + flag.removeprefix("--").replace("-", "_").upper()
    monkeypatch.setenv(variable, "true")
    assert getattr(scheduler_config_of(SCHEDULER), field)
    monkeypatch.delenv(variable)
    parser = _build_parser()
    assert flag not in scheduler_flags(parser.parse_args(["serve"]))
    assert flag in scheduler_flags(parser.parse_args(["serve", flag]))
