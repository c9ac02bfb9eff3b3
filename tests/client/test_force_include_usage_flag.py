"""`--enable-force-include-usage` reaches the scheduler's config from `scheduler` and its environment variable, and
`serve` forwards it."""

from __future__ import annotations

from cli_configs import SCHEDULER, scheduler_config_of

from client.cli import _build_parser
from scheduler_svc.cli_args import scheduler_flags


def test_the_flag_and_its_variable_turn_it_on_and_serve_forwards_it(monkeypatch):
    assert not scheduler_config_of(SCHEDULER).enable_force_include_usage
    assert scheduler_config_of([*SCHEDULER, "--enable-force-include-usage"]).enable_force_include_usage
    monkeypatch.setenv("STEPAHEAD_ENABLE_FORCE_INCLUDE_USAGE", "true")
    assert scheduler_config_of(SCHEDULER).enable_force_include_usage
    monkeypatch.delenv("STEPAHEAD_ENABLE_FORCE_INCLUDE_USAGE")
    parser = _build_parser()
    assert "--enable-force-include-usage" not in scheduler_flags(parser.parse_args(["serve"]))
    flags = scheduler_flags(parser.parse_args(["serve", "--enable-force-include-usage"]))
    assert "--enable-force-include-usage" in flags
