"""`--root-path` (vLLM's flag) reaches the scheduler's config from `scheduler` and its environment variable, `serve`
forwards it, and a prefix that is not a path such as /llm is refused naming it."""

from __future__ import annotations

import pytest
from cli_configs import SCHEDULER, scheduler_config_of

from client.cli import _build_parser
from scheduler_svc.cli_args import scheduler_flags


def test_the_flag_and_its_variable_set_it_and_serve_forwards_it(monkeypatch):
    assert scheduler_config_of(SCHEDULER).root_path == ""
    assert scheduler_config_of([*SCHEDULER, "--root-path", "/llm"]).root_path == "/llm"
    monkeypatch.setenv("STEPAHEAD_ROOT_PATH", "/api/v2")
    assert scheduler_config_of(SCHEDULER).root_path == "/api/v2"
    monkeypatch.delenv("STEPAHEAD_ROOT_PATH")
    parser = _build_parser()
    assert "--root-path" not in scheduler_flags(parser.parse_args(["serve"]))
    flags = scheduler_flags(parser.parse_args(["serve", "--root-path", "/llm"]))
    assert flags[flags.index("--root-path") + 1] == "/llm"


@pytest.mark.parametrize("value", ["llm", "/llm/", "/"])
def test_a_prefix_that_is_not_a_path_is_refused(value):
    with pytest.raises(ValueError, match="^root_path: must start with /"):
        scheduler_config_of([*SCHEDULER, "--root-path", value])
