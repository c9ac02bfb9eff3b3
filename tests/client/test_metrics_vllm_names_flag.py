"""`--metrics-vllm-names` reaches the scheduler's config from `scheduler` and its environment variable, and `serve`
forwards it."""

from __future__ import annotations

from cli_configs import SCHEDULER, scheduler_config_of

from client.cli import _build_parser
from scheduler_svc.cli_args import scheduler_flags


def test_the_flag_and_its_variable_turn_it_on_and_serve_forwards_it(monkeypatch):
    assert not scheduler_config_of(SCHEDULER).metrics_vllm_names
    assert scheduler_config_of([*SCHEDULER, "--metrics-vllm-names"]).metrics_vllm_names
    monkeypatch.setenv("STEPAHEAD_METRICS_VLLM_NAMES", "true")
    assert scheduler_config_of(SCHEDULER).metrics_vllm_names
    monkeypatch.delenv("STEPAHEAD_METRICS_VLLM_NAMES")
    parser = _build_parser()
    assert "--metrics-vllm-names" not in scheduler_flags(parser.parse_args(["serve"]))
    assert "--metrics-vllm-names" in scheduler_flags(parser.parse_args(["serve", "--metrics-vllm-names"]))
