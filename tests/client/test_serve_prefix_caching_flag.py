"""`--enable-prefix-caching` (off by default) reaches the scheduler's config from `scheduler`, `serve` and `bench`."""

from __future__ import annotations

from client.cli import _build_parser
from scheduler_svc.cli_args import scheduler_config_from_args, scheduler_flags


def test_off_by_default_and_forwarded_by_serve_when_on():
    parser = _build_parser()
    assert "--enable-prefix-caching" not in scheduler_flags(parser.parse_args(["serve"]))
    assert "--enable-prefix-caching" in scheduler_flags(parser.parse_args(["serve", "--enable-prefix-caching"]))
    assert "--enable-prefix-caching" in scheduler_flags(parser.parse_args(["bench", "--enable-prefix-caching"]))


def test_the_scheduler_reads_it_into_its_scheduling_config():
    parser = _build_parser()
    on = parser.parse_args(["scheduler", "--executor", "127.0.0.1:1", "--enable-prefix-caching"])
    off = parser.parse_args(["scheduler", "--executor", "127.0.0.1:1"])
    assert scheduler_config_from_args(on, "m", on.executor, 0, "127.0.0.1").scheduling.enable_prefix_caching
    assert not scheduler_config_from_args(off, "m", off.executor, 0, "127.0.0.1").scheduling.enable_prefix_caching
