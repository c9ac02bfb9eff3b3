"""Tool calls parsed out of one request's answer as it streams (GenerateRequest.parse_tool_calls)."""

from __future__ import annotations

from scheduler_svc.tool_calls.common import StreamDelta, new_call_id
from scheduler_svc.tool_calls.parsers import tool_call_parser
from scheduler_svc.tool_calls.request_parsing import ToolCallParsing
from stepahead_proto import generation_pb2


class OutputCalls:
    """Feeds a request's answer text to its parser's stream: what comes back is the text to send (what cannot be
    part of a call, as it comes) and each call once it is complete, with a new id."""

    def __init__(self, parsing: ToolCallParsing) -> None:
        self._stream = tool_call_parser(parsing.parser).stream_parser(parsing.names, parsing.parallel)

    def feed(self, text: str, final: bool) -> tuple[str, list[generation_pb2.ToolCall]]:
        """One more piece of the answer (``final``: the output has ended): the text and the calls to send now."""
        delta = self._stream.feed(text) if text else StreamDelta()
        if final:
            delta = delta.then(self._stream.finish())
        calls = [generation_pb2.ToolCall(id=new_call_id(), name=call.name, arguments_json=call.arguments)
                 for call in delta.calls]
        return delta.content, calls
