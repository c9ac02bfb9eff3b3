"""The executor's flags reach its config, and `stepahead serve` passes them on to the executor it starts."""

from __future__ import annotations

from client import cli
from executor_svc.cli_args import executor_config_from_args, executor_flags


def test_cpu_weight_packing_is_on_by_default_and_the_flag_turns_it_off_for_serve_and_executor():
    parser = cli._build_parser()
    default = parser.parse_args(["executor", "--model", "m"])
    assert executor_config_from_args(default, "m", 0, "127.0.0.1").cpu_weight_packing
    off = parser.parse_args(["executor", "--model", "m", "--no-cpu-weight-packing"])
    assert not executor_config_from_args(off, "m", 0, "127.0.0.1").cpu_weight_packing
    serve = parser.parse_args(["serve", "--no-cpu-weight-packing"])
    assert "--no-cpu-weight-packing" in executor_flags(serve)
    assert "--no-cpu-weight-packing" not in executor_flags(parser.parse_args(["serve"]))
