"""Environment variables as flag defaults: STEPAHEAD_<FLAG_NAME> configures --flag-name.

This is how docker-compose configures the services. A flag on the command line wins over its
variable, and the variable wins over the flag's built-in default. An empty variable counts as
unset. Values are parsed with the flag's own type and choices only when the subcommand that owns
the flag runs, so a bad value for one service never breaks another command; the error names the
variable. Switches (flags without a value) take 1/true/yes/on or 0/false/no/off.
"""

from __future__ import annotations

import argparse
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any, NoReturn

ENV_PREFIX = "STEPAHEAD_"
_TRUE_WORDS = frozenset({"1", "true", "yes", "on"})
_FALSE_WORDS = frozenset({"0", "false", "no", "off"})


def env_var_name(dest: str) -> str:
    """The variable of a flag, from its destination: max_num_seqs -> STEPAHEAD_MAX_NUM_SEQS."""
    return ENV_PREFIX + dest.upper()


@dataclass(frozen=True)
class EnvDefault:
    """A flag default taken from the environment, still a string until its subcommand runs."""

    variable: str
    raw: str
    action: argparse.Action
    parser: argparse.ArgumentParser
    builtin_default: Any


def attach_env_defaults(
    parser: argparse.ArgumentParser, environ: Mapping[str, str], only: Collection[str] | None = None
) -> None:
    """Make every option of ``parser`` (or those whose destination is in ``only``) default to its
    STEPAHEAD_* variable when that is set.

    Call it after all arguments are added. Help texts gain the variable's name; a required
    option whose variable is set stops being required.
    """
    for action in _configurable_options(parser):
        if only is not None and action.dest not in only:
            continue
        variable = env_var_name(action.dest)
        if action.help and action.help is not argparse.SUPPRESS:
            action.help = f"{action.help} [env {variable}]"
        raw = environ.get(variable, "")
        if raw.strip():
            action.default = EnvDefault(variable, raw.strip(), action, parser, action.default)
            action.required = False


def resolve_env_defaults(args: argparse.Namespace) -> argparse.Namespace:
    """Replace the environment defaults left in ``args`` by typed values (exit 2 on a bad value)."""
    for dest, value in list(vars(args).items()):
        if isinstance(value, EnvDefault):
            setattr(args, dest, _parse(value))
    return args


def flag_variables(parser: argparse.ArgumentParser) -> dict[str, str]:
    """The variable of every option of ``parser`` that can come from the environment, to its flag."""
    return {env_var_name(action.dest): max(action.option_strings, key=len) for action in _configurable_options(parser)}


def without_flag_variables(environ: Mapping[str, str], args: argparse.Namespace) -> dict[str, str]:
    """A copy of ``environ`` without the variables of the flags in ``args``.

    `stepahead serve` hands its settings to the processes it starts as explicit flags; an
    inherited variable would give a child a setting the parent did not mean for it (the
    scheduler's metrics port to the executor, say).
    """
    names = {env_var_name(dest) for dest in vars(args)}
    return {key: value for key, value in environ.items() if key not in names}


class RepeatableOption(argparse.Action):
    """A flag given once per value (``--executor A --executor B``): the values given on the command line
    replace the default (from the environment: whitespace-separated values) instead of extending it."""

    def __call__(
        self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any, option_string: Any = None
    ) -> None:
        current = getattr(namespace, self.dest, None)
        given = current if isinstance(current, list) and current is not self.default else []
        setattr(namespace, self.dest, [*given, values])


def _configurable_options(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    # argparse has no public accessor for a parser's actions; `_actions` is stable since 2.7.
    return [action for action in parser._actions if action.option_strings and _has_env_form(action)]


def _has_env_form(action: argparse.Action) -> bool:
    if action.default is argparse.SUPPRESS:  # --help, --version
        return False
    if action.nargs == 0:  # switches: store_true/false/const and --flag/--no-flag; not counters
        return action.const is not None or isinstance(action, argparse.BooleanOptionalAction)
    return True


def _parse(env: EnvDefault) -> Any:
    action = env.action
    if action.nargs == 0:
        return _parse_switch(env)
    if _takes_list(action.nargs) or isinstance(action, RepeatableOption):
        tokens = env.raw.split()
        if isinstance(action.nargs, int) and not isinstance(action, RepeatableOption) and len(tokens) != action.nargs:
            _fail(env, f"expected {action.nargs} whitespace-separated values")
        return [_convert(env, token) for token in tokens]
    return _convert(env, env.raw)


def _takes_list(nargs: Any) -> bool:
    return nargs in ("+", "*") or (isinstance(nargs, int) and nargs > 1)


def _parse_switch(env: EnvDefault) -> Any:
    word = env.raw.lower()
    if word not in _TRUE_WORDS | _FALSE_WORDS:
        _fail(env, "expected one of 1/true/yes/on or 0/false/no/off")
    enabled = word in _TRUE_WORDS
    if isinstance(env.action, argparse.BooleanOptionalAction):
        return enabled
    return env.action.const if enabled else env.builtin_default


def _convert(env: EnvDefault, token: str) -> Any:
    converter: Any = env.action.type or str
    if not callable(converter):
        _fail(env, f"flag type {converter!r} cannot be read from the environment")
    try:
        value = converter(token)
    except (TypeError, ValueError, argparse.ArgumentTypeError) as error:
        type_name = getattr(converter, "__name__", repr(converter))
        _fail(env, f"invalid {type_name} value {token!r} ({error})")
    choices = env.action.choices
    if choices is not None and value not in choices:
        _fail(env, f"{value!r} is not one of {', '.join(map(repr, choices))}")
    return value


def _fail(env: EnvDefault, reason: str) -> NoReturn:
    flag = max(env.action.option_strings, key=len)
    env.parser.error(f"environment variable {env.variable}={env.raw!r} (for {flag}): {reason}")
