"""How many tokens one streamed message carries (``--stream-interval``).

Each step gives a running request one token (or several, with speculation or multi-step), and each becomes one
stream message: at high concurrency the messages, one send each, are most of the scheduler's work. With an interval
of N, a request's first message still goes out at once (time to first token is unchanged); after it, deltas are
held and merged until they carry at least N tokens, and the last message carries whatever remains.
"""

from __future__ import annotations

from stepahead_proto import generation_pb2


def merge_delta(into: generation_pb2.GenerateResponse, later: generation_pb2.GenerateResponse) -> None:
    """Append ``later`` to ``into``: text and thinking concatenated, token ids and logprobs extended, the
    last-message fields (finish and stop reason, usage, timings, speculation statistics) taken from ``later``."""
    text, reasoning = into.text + later.text, into.reasoning_text + later.reasoning_text
    into.MergeFrom(later)  # repeated fields append; the scalars and messages set in ``later`` win
    into.text, into.reasoning_text = text, reasoning


class StreamPacer:
    """Holds one request's deltas until they make a message of ``interval`` tokens (1: every delta at once)."""

    def __init__(self, interval: int = 1) -> None:
        if interval < 1:
            raise ValueError(f"stream_interval: must be >= 1, got {interval}")
        self.interval = interval
        self._held: generation_pb2.GenerateResponse | None = None

    def pace(self, message: generation_pb2.GenerateResponse | None, final: bool = False
             ) -> generation_pb2.GenerateResponse | None:
        """The message to send now (what was held, then ``message``), or None to hold it for later."""
        if message is None:
            return None
        if self._held is not None:
            merge_delta(self._held, message)
            message, self._held = self._held, None
        first = message.prompt_tokens > 0  # set on a request's first message only, never held
        if final or first or len(message.token_ids) >= self.interval or self.interval == 1:
            return message
        self._held = message
        return None

    def take_held(self) -> generation_pb2.GenerateResponse | None:
        """What is held and not sent yet (sent before an error ends the stream), and forget it."""
        held, self._held = self._held, None
        return held
