"""`stepahead generate`: one completion from a running server, streamed as text or printed as JSON.

Every request parameter of the SDK has a flag; unset flags leave the server's defaults.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from scheduler_svc.config import DEFAULT_PORT


def add_generate_arguments(generate: argparse.ArgumentParser) -> None:
    """The prompt, the server and the request parameters of `stepahead generate`."""
    from client.cli_connection import add_wait_for_server_argument

    add_prompt_arguments(generate)
    generate.add_argument("--json", action="store_true", help="print one JSON object instead of streaming text")
    add_wait_for_server_argument(generate)
    sampling = generate.add_argument_group("sampling (unset: the server's defaults; temperature 0 = greedy)")
    for flag, kind in (("--temperature", float), ("--top-p", float), ("--top-k", int), ("--min-p", float),
                       ("--repetition-penalty", float), ("--presence-penalty", float),
                       ("--frequency-penalty", float), ("--seed", int)):
        sampling.add_argument(flag, type=kind, default=None)
    sampling.add_argument("--logprobs", type=int, default=None, metavar="N",
                          help="the sampled token's logprob and the N most likely (shown with --json)")
    sampling.add_argument("--prompt-logprobs", type=int, default=None, metavar="N",
                          help="each prompt token's logprob (after the first, given those before it) and the N "
                               "most likely there (shown with --json, as prompt_logprobs)")
    sampling.add_argument("--logit-bias", action="append", default=[], metavar="ID=BIAS", type=_bias,
                          help="add BIAS in [-100, 100] to token ID's logit (repeatable)")
    sampling.add_argument("--allowed-token-ids", action="extend", nargs="+", default=[], type=int, metavar="ID",
                          help="only these token ids may be sampled, EOS too only if listed (several after one "
                               "flag, or the flag repeated; not with a structured output format)")
    sampling.add_argument("--bad-words", action="extend", nargs="+", default=[], metavar="WORD",
                          help="words never generated, as written or after a space (several after one flag, or "
                               "the flag repeated; not with a structured output format)")
    add_structured_output_arguments(generate)
    stopping = generate.add_argument_group("stopping")
    stopping.add_argument("--max-tokens", type=int, default=None)
    stopping.add_argument("--min-tokens", type=int, default=None)
    stopping.add_argument("--stop", action="append", default=[], metavar="TEXT", help="stop string (repeatable)")
    stopping.add_argument("--stop-token-id", action="append", default=[], type=int, metavar="ID",
                          help="stop token id (repeatable)")
    stopping.add_argument("--ignore-eos", action="store_true", help="keep generating past the end-of-sequence token")
    stopping.add_argument("--include-stop-str", action="store_true", help="keep the matched stop string in the text")
    generate.add_argument("--keep-special-tokens", action="store_true",
                          help="detokenize special tokens too (default: skipped)")
    generate.add_argument("--priority", type=int, default=None,
                          help="scheduling priority: lower starts first (needs --scheduling-policy priority)")
    generate.add_argument("--truncate-prompt-tokens", type=int, default=None, metavar="N",
                          help="keep only the prompt's last N tokens (after the chat template); -1: as many as the "
                               "model's context allows")
    split = generate.add_mutually_exclusive_group()
    split.add_argument("--split-reasoning", action="store_true",
                       help="split the thinking off (to stderr) with the server's --reasoning-parser even for a --raw "
                            "prompt (default: chat prompts only)")
    split.add_argument("--no-split-reasoning", action="store_true",
                       help="leave the thinking inside the text (default: split off when the server has a parser)")
    generate.add_argument("--thinking-token-budget", type=int, default=None, metavar="N",
                          help="think at most N tokens, then the end of the thinking is forced and the model answers "
                               "(needs the server's --reasoning-parser)")
    generate.add_argument("--no-parse-tool-calls", action="store_true",
                          help="leave tool calls inside the text (default: parsed when --tools is given and the "
                               "server has a --tool-call-parser)")
    generate.add_argument("--no-speculation", action="store_true",
                          help="opt this request out of speculative decoding")
    predicted = generate.add_mutually_exclusive_group()
    predicted.add_argument("--prediction", default=None, metavar="TEXT",
                           help="predicted output (OpenAI's predicted outputs): text the answer is expected to largely "
                                "repeat, such as a file being edited; its tokens serve as speculative drafts, so the "
                                "output is unchanged, only faster where it follows them (--json: usage's "
                                "accepted_prediction_tokens and rejected_prediction_tokens)")
    predicted.add_argument("--prediction-file", type=_prediction_file, default=None, metavar="PATH",
                           help="--prediction read from this file (UTF-8, as it is)")
    generate.add_argument("--lora-adapter", default=None, metavar="NAME",
                          help="run with this LoRA adapter of the server's (one of its --lora-modules names; "
                               "unset: the base model)")


def add_structured_output_arguments(generate: argparse.ArgumentParser) -> None:
    """--json-schema, --json-object, --regex, --choice, --grammar: at most one (argparse refuses two)."""
    group = generate.add_argument_group(
        "structured output (guided decoding; at most one; unset: free text)",
        "TEXT|@PATH: the text itself, or @ and a file to read it from")
    formats = group.add_mutually_exclusive_group()
    formats.add_argument("--json-schema", type=_json_schema, default=None, metavar="TEXT|@PATH",
                         help="a JSON Schema: the output is one JSON value valid under it, written compactly")
    formats.add_argument("--json-object", action="store_true", help="the output is a JSON object")
    formats.add_argument("--regex", default=None, metavar="REGEX",
                         help="a regular expression the whole output matches (Rust regex syntax)")
    formats.add_argument("--choice", action="append", default=[], metavar="TEXT",
                         help="the output is exactly one of these strings (repeatable)")
    formats.add_argument("--grammar", type=_text_or_file, default=None, metavar="TEXT|@PATH",
                         help="a context-free grammar: Lark syntax (as llguidance reads it) or GBNF")


def add_prompt_arguments(parser: argparse.ArgumentParser) -> None:
    """The prompt and the server, shared by `generate` and `tokenize`."""
    parser.add_argument("prompt")
    parser.add_argument("--server", default=f"127.0.0.1:{DEFAULT_PORT}")
    parser.add_argument("--raw", action="store_true", help="send the prompt as is, without the chat template")
    parser.add_argument("--system", default=None, help="a system message before the prompt (not with --raw)")
    template = parser.add_argument_group("chat template (not with --raw)")
    template.add_argument("--continue", dest="continue_with", default=None, metavar="TEXT",
                          help="end the chat with an assistant message TEXT, which the model continues "
                               "(continue_final_message: a prefilled answer)")
    template.add_argument("--no-generation-prompt", action="store_true",
                          help="render the chat without the assistant header after it (add_generation_prompt false)")
    template.add_argument("--chat-template-kwargs", type=_json_object_text, default=None, metavar="JSON|@PATH",
                          help='extra chat template variables, a JSON object, e.g. \'{"enable_thinking": false}\'')
    template.add_argument("--chat-template", type=_text_or_file, default=None, metavar="TEXT|@PATH",
                          help="render the chat with this Jinja template instead of the model's (the server must run "
                               "with --trust-request-chat-template)")
    template.add_argument("--documents", type=_json_array_text, default=None, metavar="JSON|@PATH",
                          help='documents for a retrieval-augmented template, a JSON array of objects, e.g. '
                               '\'[{"title": "Paris", "text": "..."}]\'')
    template.add_argument("--tools", type=_json_array_text, default=None, metavar="JSON|@PATH",
                          help="tools the model may call, OpenAI's JSON array of function tools; with the server's "
                               "--tool-call-parser the calls come back parsed, one JSON line each after the text")


_TEMPLATE_FLAGS = {"system": ("system", "a system message"), "continue_with": ("continue", "a message to continue"),
                   "no_generation_prompt": ("no-generation-prompt", "leaving out the generation prompt"),
                   "chat_template_kwargs": ("chat-template-kwargs", "a template variable"),
                   "documents": ("documents", "documents"), "chat_template": ("chat-template", "a chat template"),
                   "tools": ("tools", "tools")}
"""Prompt flags that need the chat template (argument name -> flag, what it asks for)."""


def prompt_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    """``prompt`` (with --raw) or ``messages`` (the prompt as a user message, after --system's, before --continue's
    assistant message) with the chat template controls the flags ask for."""
    if args.raw:
        for name, (flag, what) in _TEMPLATE_FLAGS.items():
            if getattr(args, name) not in (None, False):
                raise ValueError(f"{flag}: {what} needs the chat template (drop --raw)")
        return {"prompt": args.prompt}
    system = [{"role": "system", "content": args.system}] if args.system is not None else []
    kwargs: dict[str, Any] = {"messages": [*system, {"role": "user", "content": args.prompt}]}
    if args.continue_with is not None:
        kwargs["messages"].append({"role": "assistant", "content": args.continue_with})
        kwargs["continue_final_message"] = True
    if args.no_generation_prompt:
        kwargs["add_generation_prompt"] = False
    if args.chat_template_kwargs is not None:
        kwargs["chat_template_kwargs"] = args.chat_template_kwargs
    if args.documents is not None:
        kwargs["documents"] = args.documents
    if args.chat_template is not None:
        kwargs["chat_template"] = args.chat_template
    if getattr(args, "tools", None) is not None:
        kwargs["tools"] = args.tools
    return kwargs


def generate_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    """The Client.generate keywords the flags ask for (unset ones left out)."""
    kwargs = prompt_kwargs(args)
    if args.lora_adapter:
        kwargs["model"] = args.lora_adapter
    for name in ("temperature", "top_p", "top_k", "min_p", "repetition_penalty", "presence_penalty",
                 "frequency_penalty", "seed", "logprobs", "prompt_logprobs", "max_tokens", "min_tokens", "priority",
                 "truncate_prompt_tokens", "thinking_token_budget"):
        if getattr(args, name) is not None:
            kwargs[name] = getattr(args, name)
    if args.logit_bias:
        kwargs["logit_bias"] = dict(args.logit_bias)
    if args.stop:
        kwargs["stop"] = list(args.stop)
    if args.stop_token_id:
        kwargs["stop_token_ids"] = list(args.stop_token_id)
    if args.allowed_token_ids:
        kwargs["allowed_token_ids"] = list(args.allowed_token_ids)
    if args.bad_words:
        kwargs["bad_words"] = list(args.bad_words)
    for name in ("json_schema", "regex", "grammar"):
        if getattr(args, name) is not None:
            kwargs[name] = getattr(args, name)
    if args.choice:
        kwargs["choice"] = list(args.choice)
    prediction = args.prediction if args.prediction is not None else args.prediction_file
    if prediction is not None:
        kwargs["prediction"] = prediction
    for flag, (name, value) in _SWITCHES.items():
        if getattr(args, flag):
            kwargs[name] = value
    return kwargs


_SWITCHES = {
    "ignore_eos": ("ignore_eos", True),
    "include_stop_str": ("include_stop_str_in_output", True),
    "keep_special_tokens": ("skip_special_tokens", False),
    "no_speculation": ("disable_speculation", True),
    "split_reasoning": ("split_reasoning", True),
    "no_split_reasoning": ("split_reasoning", False),
    "no_parse_tool_calls": ("parse_tool_calls", False),
    "json_object": ("json_object", True),
}
"""Switch flag -> the request option it sets, and to what."""


def run_generate(args: argparse.Namespace) -> None:
    """Send the request; stream its text to stdout (a reasoning model's thinking, split off by the server's
    --reasoning-parser, to stderr; each parsed tool call after the text, as one JSON line), or print the whole
    result as JSON with --json."""
    from client.cli_connection import connected_client
    from client.types import ToolCall

    kwargs = generate_kwargs(args)
    with connected_client(args) as client:
        if args.json:
            print(json.dumps(client.generate(**kwargs).to_dict(), indent=2))
            return
        calls: list[ToolCall] = []
        for chunk in client.generate_stream(**kwargs):
            if chunk.reasoning_text:
                print(chunk.reasoning_text, end="", file=sys.stderr, flush=True)
            print(chunk.text, end="", flush=True)
            calls += chunk.tool_calls
        print()
        for call in calls:
            print(json.dumps({"tool_call": call.to_dict()}, ensure_ascii=False))


def _bias(text: str) -> tuple[int, float]:
    token, sep, bias = text.partition("=")
    try:
        if not sep:
            raise ValueError
        return int(token), float(bias)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be ID=BIAS (an integer token id and a number), got {text!r}"
                                         ) from None


def _text_or_file(value: str) -> str:
    """The value itself, or with a leading @ the text of the file it names."""
    if not value.startswith("@"):
        return value
    return _file_text(value[1:])


def _prediction_file(value: str) -> str:
    """The text of the file ``value`` names, exactly (UTF-8, line ends as they are: the output is to repeat them)."""
    return _file_text(value, exact=True)


def _file_text(value: str, exact: bool = False) -> str:
    """The text of the file ``value`` names (UTF-8; ``exact``: line ends kept as written, not made ``\n``)."""
    path = Path(value)
    try:
        return path.read_bytes().decode("utf-8") if exact else path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        reason = error.strerror if isinstance(error, OSError) and error.strerror else str(error)
        raise argparse.ArgumentTypeError(f"cannot read {str(path)!r}: {reason}") from None


def _json_object_text(value: str) -> str:
    """JSON object text (or @PATH of a file holding it), checked to parse as an object; sent as written."""
    text = _json_schema(value)
    if not isinstance(json.loads(text), dict):
        raise argparse.ArgumentTypeError("must be a JSON object")
    return text


def _json_array_text(value: str) -> str:
    """JSON array text (or @PATH of a file holding it), checked to parse as an array; sent as written."""
    text = _json_schema(value)
    if not isinstance(json.loads(text), list):
        raise argparse.ArgumentTypeError("must be a JSON array")
    return text


def _json_schema(value: str) -> str:
    """JSON text (or @PATH of a file holding it), checked to parse; sent as written."""
    text = _text_or_file(value)
    try:
        json.loads(text)
    except ValueError as error:
        source = f"{value[1:]!r} is" if value.startswith("@") else "is"
        raise argparse.ArgumentTypeError(f"{source} not valid JSON ({error})") from None
    return text
