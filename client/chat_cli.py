"""`stepahead chat`: a conversation with a running server in the terminal.

Each line read is a user message; the reply streams as it is generated (a reasoning model's thinking, split off by
the server's --reasoning-parser, to stderr: the history keeps the answer) and joins the history the next message is
sent with (the model's chat template renders the whole conversation each turn). `/reset` clears the history (the
--system message stays), `/exit` or end of input ends the chat. A request the server refuses (the conversation has
outgrown the model's context, say) prints the error and leaves the history as it was, so the next line is sent
without it.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any, TextIO

from scheduler_svc.config import DEFAULT_PORT

EXIT_COMMANDS = ("/exit", "/quit")
RESET_COMMAND = "/reset"
PROMPT = "> "


def add_chat_arguments(chat: argparse.ArgumentParser) -> None:
    """The server, the system message and the sampling settings of `stepahead chat`."""
    from client.cli_connection import add_wait_for_server_argument
    from client.cli_values import positive_int

    chat.add_argument("--server", default=f"127.0.0.1:{DEFAULT_PORT}")
    chat.add_argument("--system", default=None, help="a system message the conversation starts with")
    chat.add_argument("--max-tokens", type=positive_int, default=None, help="longest reply (default: the server's)")
    chat.add_argument("--temperature", type=float, default=None, help="0 = greedy (default: the server's)")
    chat.add_argument("--top-p", type=float, default=None)
    chat.add_argument("--seed", type=int, default=None)
    chat.add_argument("--lora-adapter", default=None, metavar="NAME",
                      help="talk to this LoRA adapter of the server's (unset: the base model)")
    add_wait_for_server_argument(chat)


def sampling_options(args: argparse.Namespace) -> dict[str, Any]:
    """The generate keywords every turn is sent with (unset flags left out)."""
    options = {name: getattr(args, name) for name in ("max_tokens", "temperature", "top_p", "seed")
               if getattr(args, name) is not None}
    if args.lora_adapter:
        options["model"] = args.lora_adapter
    return options


def run_chat(args: argparse.Namespace, lines: TextIO | None = None, out: TextIO | None = None) -> None:
    """Talk until /exit or the end of ``lines`` (stdin); replies go to ``out`` (stdout), errors to stderr."""
    from client.cli_connection import connected_client

    lines = sys.stdin if lines is None else lines
    out = sys.stdout if out is None else out
    opening = [{"role": "system", "content": args.system}] if args.system is not None else []
    interactive = lines.isatty()
    with connected_client(args) as client:
        history = list(opening)
        while (line := _next_line(lines, out, interactive)) is not None:
            text = line.strip()
            if text in EXIT_COMMANDS:
                break
            if text == RESET_COMMAND:
                history = list(opening)
                print("(history cleared)", file=out, flush=True)
            elif text:
                history = _turn(client, history, text, sampling_options(args), out)


def _next_line(lines: TextIO, out: TextIO, interactive: bool) -> str | None:
    if interactive:
        print(PROMPT, end="", file=out, flush=True)
    line = lines.readline()
    return line if line else None


def _turn(client: Any, history: list[dict[str, str]], text: str, options: dict[str, Any],
          out: TextIO) -> list[dict[str, str]]:
    """Send the conversation with ``text`` as the next user message and stream the reply; the history with both,
    or (the server refused it) as it was."""
    from client.errors import StepaheadError

    messages = [*history, {"role": "user", "content": text}]
    parts: list[str] = []
    try:
        for chunk in client.generate_stream(messages=messages, **options):
            parts.append(chunk.text)
            if chunk.reasoning_text:
                print(chunk.reasoning_text, end="", file=sys.stderr, flush=True)
            print(chunk.text, end="", file=out, flush=True)
    except StepaheadError as error:
        print(f"\nerror: {error}", file=sys.stderr, flush=True)
        return history
    print(file=out, flush=True)
    return [*messages, {"role": "assistant", "content": "".join(parts)}]
