"""STEPAHEAD_<FLAG_NAME> variables as flag defaults: precedence, typing, errors, and the real CLI."""

from __future__ import annotations

import argparse

import pytest

from client import cli
from client.env_defaults import (
    attach_env_defaults,
    env_var_name,
    flag_variables,
    resolve_env_defaults,
    without_flag_variables,
)


def demo_parser(environ: dict[str, str]) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="demo")
    parser.add_argument("--port", type=int, default=50051, help="port")
    parser.add_argument("--executor", required=True)
    parser.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"))
    parser.add_argument("--ratio", type=float, default=None)
    parser.add_argument("--depths", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--tracing", action="store_true")
    parser.add_argument("--no-warmup", dest="warmup", action="store_false")
    parser.add_argument("--color", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--verbose", "-v", action="count", default=0)
    attach_env_defaults(parser, environ)
    return parser


def parse(environ: dict[str, str], *argv: str) -> argparse.Namespace:
    return resolve_env_defaults(demo_parser(environ).parse_args(list(argv)))


def test_variable_name_comes_from_the_flag():
    assert env_var_name("max_num_seqs") == "STEPAHEAD_MAX_NUM_SEQS"
    assert set(flag_variables(demo_parser({}))) == {
        "STEPAHEAD_PORT", "STEPAHEAD_EXECUTOR", "STEPAHEAD_DTYPE", "STEPAHEAD_RATIO", "STEPAHEAD_DEPTHS",
        "STEPAHEAD_TRACING", "STEPAHEAD_WARMUP", "STEPAHEAD_COLOR",
    }  # not --help, not the --verbose counter


def test_builtin_defaults_without_variables():
    args = parse({}, "--executor", "e:1")
    assert (args.port, args.dtype, args.ratio, args.depths, args.tracing, args.warmup, args.color) == (
        50051, "float32", None, [1, 2], False, True, True)


def test_variables_are_parsed_with_the_flags_types():
    environ = {"STEPAHEAD_PORT": "7000", "STEPAHEAD_EXECUTOR": "executor:50061", "STEPAHEAD_DTYPE": "bfloat16",
               "STEPAHEAD_RATIO": "0.25", "STEPAHEAD_DEPTHS": "1 2 4"}
    args = parse(environ)
    assert (args.port, args.executor, args.dtype, args.ratio, args.depths) == (
        7000, "executor:50061", "bfloat16", 0.25, [1, 2, 4]
    )


def test_command_line_wins_over_the_variable():
    args = parse({"STEPAHEAD_PORT": "7000", "STEPAHEAD_EXECUTOR": "a:1"}, "--port", "8000", "--executor", "b:2")
    assert (args.port, args.executor) == (8000, "b:2")


@pytest.mark.parametrize(
    ("word", "tracing", "warmup", "color"), [("1", True, False, True), ("off", False, True, False)]
)
def test_switches_read_true_and_false_words(word, tracing, warmup, color):
    environ = {
        "STEPAHEAD_EXECUTOR": "e:1", "STEPAHEAD_TRACING": word, "STEPAHEAD_WARMUP": word, "STEPAHEAD_COLOR": word
    }
    args = parse(environ)
    assert (args.tracing, args.warmup, args.color) == (tracing, warmup, color)


def test_empty_variable_counts_as_unset():
    with pytest.raises(SystemExit):
        parse({"STEPAHEAD_EXECUTOR": "  "})
    assert parse({"STEPAHEAD_EXECUTOR": "e:1", "STEPAHEAD_RATIO": ""}).ratio is None


@pytest.mark.parametrize(("variable", "value", "expected"), [
    ("STEPAHEAD_PORT", "abc", "invalid int value 'abc'"),
    ("STEPAHEAD_DTYPE", "int8", "'int8' is not one of 'float32', 'bfloat16'"),
    ("STEPAHEAD_TRACING", "maybe", "expected one of 1/true/yes/on"),
    ("STEPAHEAD_DEPTHS", "1 x", "invalid int value 'x'"),
])
def test_bad_value_is_an_error_naming_the_variable(capsys, variable, value, expected):
    with pytest.raises(SystemExit) as exit_info:
        parse({"STEPAHEAD_EXECUTOR": "e:1", variable: value})
    assert exit_info.value.code == 2
    error = capsys.readouterr().err
    assert f"environment variable {variable}={value!r}" in error and expected in error


def test_help_names_the_variable():
    assert "[env STEPAHEAD_PORT]" in demo_parser({}).format_help()


def test_the_cli_reads_variables_for_the_services_only(monkeypatch, capsys):
    monkeypatch.setenv("STEPAHEAD_EXECUTOR", "executor:50061")
    monkeypatch.setenv("STEPAHEAD_NUM_THREADS", "3")
    monkeypatch.setenv("STEPAHEAD_MAX_NUM_BATCHED_TOKENS", "not-a-number")  # a scheduler flag only
    executor = resolve_env_defaults(cli._build_parser().parse_args(["executor"]))
    assert executor.num_threads == 3
    argv = ["scheduler", "--max-num-batched-tokens", "4"]
    scheduler_with_flag = resolve_env_defaults(cli._build_parser().parse_args(argv))
    assert (scheduler_with_flag.executor, scheduler_with_flag.max_num_batched_tokens) == (["executor:50061"], 4)
    with pytest.raises(SystemExit):
        resolve_env_defaults(cli._build_parser().parse_args(["scheduler"]))
    assert "STEPAHEAD_MAX_NUM_BATCHED_TOKENS" in capsys.readouterr().err
    generate = resolve_env_defaults(cli._build_parser().parse_args(["generate", "hi"]))
    assert generate.max_tokens is None  # other commands ignore the variables


def test_serve_children_do_not_inherit_the_parents_flag_variables(monkeypatch):
    monkeypatch.setenv("STEPAHEAD_METRICS_PORT", "9400")
    args = resolve_env_defaults(cli._build_parser().parse_args(["serve"]))
    environ = {"STEPAHEAD_METRICS_PORT": "9400", "STEPAHEAD_NUM_THREADS": "2", "STEPAHEAD_CACHE": "/c", "PATH": "/bin"}
    assert without_flag_variables(environ, args) == {"STEPAHEAD_CACHE": "/c", "PATH": "/bin"}


def test_a_repeatable_flag_reads_several_values_and_the_command_line_replaces_them(monkeypatch):
    monkeypatch.setenv("STEPAHEAD_EXECUTOR", "a:1 b:2")
    from_env = resolve_env_defaults(cli._build_parser().parse_args(["scheduler"]))
    assert from_env.executor == ["a:1", "b:2"]
    argv = ["scheduler", "--executor", "c:3", "--executor", "d:4"]
    assert resolve_env_defaults(cli._build_parser().parse_args(argv)).executor == ["c:3", "d:4"]
    monkeypatch.delenv("STEPAHEAD_EXECUTOR")
    assert cli._build_parser().parse_args(["scheduler", "--executor", "e:5"]).executor == ["e:5"]
