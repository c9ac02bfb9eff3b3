"""`--enable-prefix-caching` (on by default for `serve` and `scheduler`, off for `bench`, whose runs repeat prompts)
reaches the scheduler's config from `scheduler`, `serve` and `bench`."""

from __future__ import annotations

from client.cli import _build_parser
from client.env_defaults import resolve_env_defaults
from scheduler_svc.cli_args import scheduler_config_from_args, scheduler_flags


def test_on_by_default_for_serve_and_forwarded_either_way():
    parser = _build_parser()
    assert "--enable-prefix-caching" in scheduler_flags(parser.parse_args(["serve"]))
    assert "--no-enable-prefix-caching" in scheduler_flags(parser.parse_args(["serve", "--no-enable-prefix-caching"]))


def test_off_by_default_for_the_bench():
    parser = _build_parser()
    assert "--no-enable-prefix-caching" in scheduler_flags(parser.parse_args(["bench"]))
    assert "--enable-prefix-caching" in scheduler_flags(parser.parse_args(["bench", "--enable-prefix-caching"]))


def test_the_scheduler_reads_it_into_its_scheduling_config():
    parser = _build_parser()
    default = parser.parse_args(["scheduler", "--executor", "127.0.0.1:1"])
    off = parser.parse_args(["scheduler", "--executor", "127.0.0.1:1", "--no-enable-prefix-caching"])
    config = scheduler_config_from_args(default, "m", default.executor, 0, "127.0.0.1")
    assert config.scheduling.enable_prefix_caching
    assert not scheduler_config_from_args(off, "m", off.executor, 0, "127.0.0.1").scheduling.enable_prefix_caching


def test_the_environment_turns_it_off(monkeypatch):
    monkeypatch.setenv("STEPAHEAD_ENABLE_PREFIX_CACHING", "0")
    args = _build_parser().parse_args(["scheduler", "--executor", "127.0.0.1:1"])
    assert resolve_env_defaults(args).enable_prefix_caching is False
