"""`stepahead serve --num-spec-tokens dynamic|N` (dynamic by default with a drafter) becomes the executor's
K_max and the scheduler's K mode; `stepahead scheduler` keeps the executor's K unless told otherwise."""

from __future__ import annotations

import pytest

from client.cli import _build_parser
from executor_svc.cli_args import executor_flags
from scheduler_svc.cli_args import scheduler_config_from_args, scheduler_flags


def value_after(flags: list[str], name: str) -> str | None:
    return flags[flags.index(name) + 1] if name in flags else None


def test_serve_defaults_to_dynamic_k_with_a_drafter():
    args = _build_parser().parse_args(["serve", "--spec-method", "ngram"])
    assert value_after(executor_flags(args), "--num-spec-tokens") == "5"
    assert value_after(scheduler_flags(args), "--num-spec-tokens") == "dynamic"


def test_serve_with_a_fixed_k_and_its_own_k_max():
    args = _build_parser().parse_args(["serve", "--spec-method", "ngram", "--num-spec-tokens", "2"])
    assert value_after(executor_flags(args), "--num-spec-tokens") == "2"
    assert value_after(scheduler_flags(args), "--num-spec-tokens") == "2"
    args = _build_parser().parse_args(["serve", "--spec-method", "ngram", "--max-num-spec-tokens", "7"])
    assert value_after(executor_flags(args), "--num-spec-tokens") == "7"


def test_serve_without_a_drafter_sends_no_k_to_the_scheduler():
    args = _build_parser().parse_args(["serve", "--spec-method", "none"])
    assert value_after(scheduler_flags(args), "--num-spec-tokens") is None


def test_serve_defaults_to_the_shipped_drafter_with_dynamic_k():
    """auto: the executor decides (the shipped EAGLE-style drafter, or none: the scheduler then has no K to choose)."""
    args = _build_parser().parse_args(["serve"])
    assert value_after(executor_flags(args), "--spec-method") == "auto"
    assert value_after(scheduler_flags(args), "--num-spec-tokens") == "dynamic"


def test_a_bad_k_is_refused(capsys):
    with pytest.raises(SystemExit):
        _build_parser().parse_args(["serve", "--num-spec-tokens", "lots"])
    assert "must be dynamic or a number" in capsys.readouterr().err


def test_scheduler_alone_defaults_to_the_executors_k():
    args = _build_parser().parse_args(["scheduler", "--executor", "127.0.0.1:1"])
    assert scheduler_config_from_args(args, "m", args.executor, 0, "127.0.0.1").num_spec_tokens == "auto"
    args = _build_parser().parse_args(["scheduler", "--executor", "127.0.0.1:1", "--num-spec-tokens", "dynamic",
                                       "--spec-profile-dir", "/p"])
    config = scheduler_config_from_args(args, "m", args.executor, 0, "127.0.0.1")
    assert config.num_spec_tokens == "dynamic" and config.spec_profile_dir == "/p"
