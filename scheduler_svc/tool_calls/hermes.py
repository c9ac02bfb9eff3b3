"""Hermes-style tool calls in free text (tool_choice "auto" with ``--tool-call-parser hermes``), whole and streamed.

A model trained on the Hermes format (Hermes 2/3, Qwen 2.5/3 and others whose chat template renders ``tools``)
writes each call as a block ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` (``"parameters"`` is taken
for ``"arguments"``, as some models write it), after some text or none:

- the text before the first block is the message's ``content``, trailing whitespace dropped (None when nothing
  else is left); the text between and after blocks is dropped;
- each block is one call: a known function's name and its arguments (an object) written as JSON text;
- with ``parallel`` False only the first call is kept;
- an output without a block is its own content (None when empty); an output with a block that does not parse, is
  not closed or names a function that is not among the tools is returned whole as content, with no call.

parse_output reads a finished output. stream_parser reads the same output as it is generated and says what a
stream may send: content as it comes, except for trailing whitespace and a trailing beginning of ``<tool_call>``
(held until what follows decides them), and each call once its ``</tool_call>`` has come. Whatever the pieces, it
ends with the same content and calls as parse_output, but for one case a stream cannot take back: a bad block after
a call was sent. The stream then sends the text from that block on as content (parse_output gives the whole output
as content, with no call).
"""

from __future__ import annotations

from collections.abc import Collection

from scheduler_svc.tool_calls import common
from scheduler_svc.tool_calls.blocks import BlockCallStream, Blocks, parse_blocks
from scheduler_svc.tool_calls.common import ParsedCall, ParsedOutput, call_of_json

START = "<tool_call>"
END = "</tool_call>"


def parse_block(body: str, names: Collection[str]) -> ParsedCall | None:
    """The call in the text between ``<tool_call>`` and ``</tool_call>``; None unless it is a JSON object with a
    ``name`` among ``names`` and an object of ``arguments`` (or ``parameters``)."""
    return call_of_json(body, names)


BLOCKS = Blocks(START, END, parse_block)


def parse_output(text: str, names: Collection[str], parallel: bool = True) -> ParsedOutput:
    """The content and calls of a finished output (see the module's docstring)."""
    return parse_blocks(BLOCKS, text, names, parallel)


def held_suffix(text: str) -> int:
    """How many characters at the end of ``text`` must wait for what follows: the longest end of it that begins
    ``<tool_call>`` (but is not all of it), and the whitespace before that."""
    return common.held_suffix(text, START)


def stream_parser(names: Collection[str], parallel: bool = True) -> BlockCallStream:
    """A parser of one output as it is generated (the parser interface of common.py)."""
    return BlockCallStream(BLOCKS, names, parallel)
