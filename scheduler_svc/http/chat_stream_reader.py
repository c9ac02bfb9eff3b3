"""The chat endpoint's stream chunks (one choice) read as pieces in generation order, for the APIs whose streams are
made from them (the Responses and Messages APIs' event translators)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal


@dataclass(frozen=True)
class ChatPiece:
    """One piece of the output: thinking, answer, the start of a tool call, or more of its arguments."""

    kind: Literal["reasoning", "content", "call", "arguments"]
    text: str = ""
    """The thinking, the answer or the arguments that came."""
    call_id: str = ""
    """Kind "call": the call's id."""
    name: str = ""
    """Kind "call": the function called."""
    logprobs: tuple[dict[str, Any], ...] = field(default=())
    """Kind "content": the chat logprobs entries of the tokens since the last content piece (with logprobs asked)."""


class ChatStreamReader:
    """Reads chunks into pieces, keeping what the stream ends with: its finish reason and usage."""

    def __init__(self) -> None:
        self.finish_reason: str | None = None
        self.usage: dict[str, Any] | None = None
        self.pending_logprobs: list[dict[str, Any]] = []
        """Logprobs entries not given to a content piece yet (their chunks carried no content)."""

    def pieces(self, chunk: dict[str, Any]) -> list[ChatPiece]:
        """The pieces of one chunk, in order (a tool call's header comes with its id; a named call's arguments
        follow in later chunks without one)."""
        if chunk.get("usage"):
            self.usage = chunk["usage"]
        pieces: list[ChatPiece] = []
        for choice in chunk.get("choices", []):
            delta = choice.get("delta") or {}
            self.pending_logprobs += (choice.get("logprobs") or {}).get("content") or []
            if delta.get("reasoning"):
                pieces.append(ChatPiece("reasoning", delta["reasoning"]))
            if delta.get("content"):
                pieces.append(ChatPiece("content", delta["content"], logprobs=tuple(self.pending_logprobs)))
                self.pending_logprobs = []
            for call in delta.get("tool_calls") or []:
                function = call.get("function") or {}
                if call.get("id"):
                    pieces.append(ChatPiece("call", call_id=call["id"], name=function.get("name", "")))
                if function.get("arguments"):
                    pieces.append(ChatPiece("arguments", function["arguments"]))
            if choice.get("finish_reason") is not None:
                self.finish_reason = choice["finish_reason"]
        return pieces
