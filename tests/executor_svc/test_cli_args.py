"""The executor's flags reach its config, and `stepahead serve` passes them on to the executor it starts."""

from __future__ import annotations

import pytest

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


@pytest.mark.parametrize("flags, message", [
    (["--spec-method", "draft_model", "--draft-model", "{missing}"], "draft_model: {missing} is not a directory"),
    (["--spec-method", "draft_model", "--draft-model", "{empty}"], "draft_model: {empty} has no config.json"),
    (["--spec-method", "eagle", "--eagle-drafter", "{missing}"], "eagle_drafter: {missing} is not a directory"),
    (["--spec-method", "eagle_ngram", "--eagle-drafter", "{empty}"], "eagle_drafter: {empty} has no config.json"),
])
def test_a_drafter_directory_that_cannot_be_read_names_its_flag_before_loading(flags, message, tmp_path):
    places = {"missing": str(tmp_path / "missing"), "empty": str(tmp_path)}
    argv = ["executor", "--model", "m", *[flag.format(**places) for flag in flags]]
    with pytest.raises(ValueError) as error:
        executor_config_from_args(cli._build_parser().parse_args(argv), "m", 0, "127.0.0.1")
    assert str(error.value) == message.format(**places)


def test_a_readable_drafter_directory_passes(tiny_model_dir):
    args = cli._build_parser().parse_args(["executor", "--model", "m", "--spec-method", "draft_model",
                                           "--draft-model", str(tiny_model_dir)])
    assert executor_config_from_args(args, "m", 0, "127.0.0.1").draft_model_dir == str(tiny_model_dir)


def test_lora_modules_reach_the_config_from_the_flag_or_its_variable_and_serve_passes_them_on(monkeypatch):
    parser = cli._build_parser()
    args = parser.parse_args(["executor", "--model", "m", "--lora-modules", "sql=/a/sql", "fr=/a/fr"])
    assert executor_config_from_args(args, "m", 0, "127.0.0.1").lora_modules == ("sql=/a/sql", "fr=/a/fr")
    assert executor_config_from_args(parser.parse_args(["executor", "--model", "m"]), "m", 0, "x").lora_modules == ()
    serve = parser.parse_args(["serve", "--lora-modules", "sql=/a/sql", "--max-loras", "4", "--max-lora-rank", "32",
                               "--allow-runtime-lora-updating"])
    flags = executor_flags(serve)
    assert flags[flags.index("--lora-modules") + 1] == "sql=/a/sql"
    assert flags[flags.index("--max-loras") + 1] == "4" and flags[flags.index("--max-lora-rank") + 1] == "32"
    slots = parser.parse_args(["executor", "--model", "m", "--max-loras", "4", "--max-lora-rank", "32"])
    config = executor_config_from_args(slots, "m", 0, "x")
    assert (config.max_loras, config.max_lora_rank) == (4, 32)
    from scheduler_svc.cli_args import scheduler_flags

    assert "--allow-runtime-lora-updating" in scheduler_flags(serve)
    from client.env_defaults import resolve_env_defaults

    monkeypatch.setenv("STEPAHEAD_LORA_MODULES", "sql=/a/sql fr=/a/fr")  # docker-compose's way
    from_env = resolve_env_defaults(cli._build_parser().parse_args(["executor", "--model", "m"]))
    assert executor_config_from_args(from_env, "m", 0, "x").lora_modules == ("sql=/a/sql", "fr=/a/fr")
