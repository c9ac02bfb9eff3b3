"""One log line per ended request (``--enable-log-requests``, vLLM's name): how it ended, its tokens and timings.

The line carries no prompt or output text, only ids, counts and times, so it is safe to keep where the traffic is
private; with the flag off (the default) nothing is formatted at all.
"""

from __future__ import annotations

import logging

import grpc

from stepahead_proto import generation_pb2

logger = logging.getLogger("stepahead.requests")

_FINISH_NAMES = {
    generation_pb2.FINISH_REASON_STOP: "stop",
    generation_pb2.FINISH_REASON_LENGTH: "length",
    generation_pb2.FINISH_REASON_ABORT: "abort",
}


class RequestLog:
    """Logs each request as it ends, when ``enabled``."""

    def __init__(self, enabled: bool = False, group: str = "") -> None:
        self.enabled = enabled
        self._group = f" on {group}" if group else ""

    def finished(self, message: generation_pb2.GenerateResponse) -> None:
        """A request ended with ``message``, its last stream message (finish reason, usage, timings, spec)."""
        if not self.enabled:
            return
        logger.info("%s", finished_line(message, self._group))

    def failed(self, request_id: str, code: grpc.StatusCode, reason: str) -> None:
        """A request ended with an error status instead of a last message."""
        if self.enabled:
            logger.info("request %s%s failed: %s %s", request_id, self._group, code.name, reason)


def finished_line(message: generation_pb2.GenerateResponse, group: str = "") -> str:
    """The log line of a request that ended with ``message``."""
    finish = _FINISH_NAMES.get(message.finish_reason, str(message.finish_reason))
    if message.stop_reason:
        finish += f" {message.stop_reason!r}"
    usage, timings = message.usage, message.timings
    line = (f"request {message.request_id}{group} finished ({finish}): prompt {usage.prompt_tokens} tokens "
            f"({usage.cached_prompt_tokens} cached), output {usage.completion_tokens} tokens, "
            f"queue {timings.queue_s:.3f} s, ttft {timings.ttft_s:.3f} s, itl {timings.itl_mean_s * 1000:.1f} ms, "
            f"e2e {timings.e2e_s:.3f} s")
    if usage.num_preemptions:
        line += f", {usage.num_preemptions} preemptions"
    if message.HasField("spec") and message.spec.drafted:
        line += f", drafts accepted {message.spec.accepted}/{message.spec.drafted}"
    return line
