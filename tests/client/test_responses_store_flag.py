"""`--responses-store-size` (stored Responses API responses) reaches the scheduler's config from `scheduler` and its
environment variable, `serve` forwards it when it is not the default, and a negative size is refused naming it."""

from __future__ import annotations

import pytest
from cli_configs import SCHEDULER, scheduler_config_of

from client.cli import _build_parser
from scheduler_svc.cli_args import scheduler_flags
from scheduler_svc.config import DEFAULT_RESPONSES_STORE_SIZE


def test_the_flag_and_its_variable_set_the_size_and_serve_forwards_it(monkeypatch):
    assert scheduler_config_of(SCHEDULER).responses_store_size == DEFAULT_RESPONSES_STORE_SIZE
    assert scheduler_config_of([*SCHEDULER, "--responses-store-size", "0"]).responses_store_size == 0
    monkeypatch.setenv("STEPAHEAD_RESPONSES_STORE_SIZE", "7")
    assert scheduler_config_of(SCHEDULER).responses_store_size == 7
    monkeypatch.delenv("STEPAHEAD_RESPONSES_STORE_SIZE")
    parser = _build_parser()
    assert "--responses-store-size" not in scheduler_flags(parser.parse_args(["serve"]))
    flags = scheduler_flags(parser.parse_args(["serve", "--responses-store-size", "0"]))
    assert flags[flags.index("--responses-store-size") + 1] == "0"


def test_a_negative_size_is_refused_naming_it():
    with pytest.raises(ValueError, match="^responses_store_size: must be >= 0, got -1"):
        scheduler_config_of([*SCHEDULER, "--responses-store-size", "-1"])
