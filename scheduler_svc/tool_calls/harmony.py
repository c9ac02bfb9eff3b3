"""gpt-oss tool calls (tool_choice "auto" with ``--tool-call-parser openai``, with ``--reasoning-parser
openai_gptoss``), whole and streamed.

gpt-oss writes a call as a harmony message addressed to the function, its arguments a JSON object, ended by the
``<|call|>`` stop token. The reasoning parser hands each such message on, in the content, as
``<|channel|>commentary to=functions.NAME<|message|>ARGUMENTS`` (scheduler_svc/reasoning/harmony.py; closed by
``<|call|>`` when a later message follows), so this parser reads:

- the text before the first call is the message's ``content``, trailing whitespace dropped (None when nothing else
  is left; the model's preamble, on the commentary channel, is such text); text between calls is dropped;
- each call runs to ``<|call|>`` or to the end of the output: a known function's name and its arguments (a JSON
  object; the header's ``<|constrain|>json`` and such, as the raw format writes them, are skipped);
- with ``parallel`` False only the first call is kept;
- an output without a call is its own content (None when empty); an output with a call whose arguments do not parse
  or whose function is not among the tools is returned whole as content, with no call.

A call is complete only when ``<|call|>`` or the end of the output comes, so a stream sends each call then; content
goes out as it comes, except for trailing whitespace and what may begin a call (held until what follows decides).
"""

from __future__ import annotations

import json
from collections.abc import Collection

from scheduler_svc.reasoning.harmony import CALL_END, CALL_OPENER, MESSAGE
from scheduler_svc.tool_calls.blocks import BlockCallStream, Blocks, parse_blocks
from scheduler_svc.tool_calls.common import ParsedCall, ParsedOutput

START = CALL_OPENER
END = CALL_END


def parse_call(body: str, names: Collection[str]) -> ParsedCall | None:
    """The call in the text after ``to=functions.`` (up to ``<|call|>`` or the output's end): ``NAME ...<|message|>``
    and a JSON object; None unless NAME is among ``names`` and the arguments are an object."""
    header, found, arguments = body.partition(MESSAGE)
    words = header.replace("<|", " <|").split()
    if not found or not words or words[0] not in names:
        return None
    try:
        value = json.loads(arguments)
    except (ValueError, RecursionError):
        return None
    return ParsedCall(words[0], json.dumps(value, ensure_ascii=False)) if isinstance(value, dict) else None


BLOCKS = Blocks(START, END, parse_call, ends_at_output_end=True)
"""A call ends at ``<|call|>``, or the output's end: the model's own ``<|call|>`` is a stop token."""


def parse_output(text: str, names: Collection[str], parallel: bool = True) -> ParsedOutput:
    """The content and calls of a finished output (see the module's docstring)."""
    return parse_blocks(BLOCKS, text, names, parallel)


def stream_parser(names: Collection[str], parallel: bool = True) -> BlockCallStream:
    """A parser of one output as it is generated (the parser interface of common.py)."""
    return BlockCallStream(BLOCKS, names, parallel)
