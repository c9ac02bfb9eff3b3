"""Turns sampled token ids into stream messages: stop conditions, detokenization, the split of thinking from the
answer, tool calls parsed out of the answer, logprobs, usage."""

from __future__ import annotations

from dataclasses import dataclass

from scheduler_svc.detokenizer import IncrementalDetokenizer
from scheduler_svc.reasoning.splitters import ReasoningSplitter, reasoning_splitter
from scheduler_svc.request import Request
from scheduler_svc.request_timing import RequestTiming
from scheduler_svc.spec_stats import SpecStatsTracker
from scheduler_svc.stop_checker import StopStringChecker
from scheduler_svc.stream_pacing import StreamPacer
from scheduler_svc.tokenizer import Tokenizer
from scheduler_svc.tool_calls.output_calls import OutputCalls
from stepahead_proto import generation_pb2

FinishReason = generation_pb2.FinishReason


@dataclass
class _Finish:
    reason: generation_pb2.FinishReason
    stop_reason: str = ""


class RequestOutputState:
    """The output side of one request: its detokenizer, stop-string checker and timing."""

    def __init__(self, request: Request, tokenizer: Tokenizer, max_model_len: int, timing: RequestTiming,
                 stream_interval: int = 1) -> None:
        """``stream_interval``: tokens per streamed message after the first (see stream_pacing.py)."""
        self.request = request
        self.max_model_len = max_model_len
        self.timing = timing
        params = request.stop_params
        self._detokenizer = IncrementalDetokenizer(tokenizer, request.prompt_token_ids, params.skip_special_tokens)
        self._stop_checker = (
            StopStringChecker(list(params.stop), params.include_stop_str_in_output) if params.stop else None
        )
        self._reasoning: ReasoningSplitter | None = (
            reasoning_splitter(request.reasoning_parser) if request.reasoning_parser else None)
        """Splits the text (after the stop rules) into thinking and answer: Request.reasoning_parser."""
        self._calls = OutputCalls(request.tool_call_parsing) if request.tool_call_parsing else None
        """Parses tool calls out of the answer: Request.tool_call_parsing."""
        self._sent_first_message = False
        self._stop_string_matched = False
        self.spec = SpecStatsTracker()
        self.finish: _Finish | None = None
        self._pacer = StreamPacer(stream_interval)
        self._prompt_logprobs: dict[int, generation_pb2.PositionLogprobs] = {}
        """Prompt logprobs by prompt position, as chunks scored them (a recomputed chunk scores its positions again:
        the first result kept)."""

    def append_tokens(
        self, token_ids: list[int], logprobs: list[generation_pb2.PositionLogprobs], now: float
    ) -> generation_pb2.GenerateResponse | None:
        """Append a step's tokens in order, stopping at the first stop condition (the rest is dropped).

        Returns the message to stream, or None when there is nothing to say yet (or it is held for the stream
        interval).
        """
        self.timing.mark_tokens(now)
        accepted: list[int] = []
        text_parts: list[str] = []
        for token_id in token_ids:
            accepted.append(token_id)
            self.request.output_token_ids.append(token_id)
            text_parts.append(self._consume(token_id))
            if self.finish is not None:
                break
        if self.finish is not None and not self._stop_string_matched:
            text_parts.append(self._flush())  # the held-back tail is final now
        message = self._message(accepted, logprobs[: len(accepted)], "".join(text_parts))
        return self._pacer.pace(message, final=self.finish is not None)

    def record_prompt_logprobs(self, start: int, positions: list[generation_pb2.PositionLogprobs]) -> None:
        """The logprobs of prompt positions start, start + 1, ... (sent with the first message)."""
        for offset, position in enumerate(positions):
            self._prompt_logprobs.setdefault(start + offset, position)

    def take_unsent(self) -> generation_pb2.GenerateResponse | None:
        """Output held for the stream interval and not sent yet (to send before an error ends the stream)."""
        return self._pacer.take_held()

    def _consume(self, token_id: int) -> str:
        """Check one token against the stop rules and return the text it makes final."""
        params = self.request.stop_params
        num_output = self.request.num_output_tokens
        past_min = num_output >= params.min_tokens
        if past_min and (
            token_id in params.stop_token_ids or (not params.ignore_eos and token_id in params.eos_token_ids)
        ):
            reason = str(token_id) if token_id in params.stop_token_ids else ""
            self.finish = _Finish(FinishReason.FINISH_REASON_STOP, reason)
            return ""
        delta = self._detokenizer.push([token_id])
        if self._stop_checker is not None and past_min:
            delta, matched = self._stop_checker.feed(delta)
            if matched is not None:
                self.finish = _Finish(FinishReason.FINISH_REASON_STOP, matched)
                self._stop_string_matched = True
                return delta
        if num_output >= params.max_tokens or self.request.num_tokens >= self.max_model_len:
            self.finish = _Finish(FinishReason.FINISH_REASON_LENGTH)
        return delta

    def _flush(self) -> str:
        """The text held back until the finish; a stop string inside it still ends the output there."""
        text = self._detokenizer.flush()
        if self._stop_checker is None:
            return text
        if text:
            text, matched = self._stop_checker.feed(text)
            if matched is not None:
                self.finish = _Finish(FinishReason.FINISH_REASON_STOP, matched)
                return text
        return text + self._stop_checker.flush()

    def _message(
        self, token_ids: list[int], logprobs: list[generation_pb2.PositionLogprobs], text: str
    ) -> generation_pb2.GenerateResponse | None:
        reasoning, text = self._split(text)
        text, calls = self._parse_calls(text, final=self.finish is not None)
        if (not token_ids and not text and not reasoning and not calls and self.finish is None
                and self._sent_first_message):
            return None
        message = generation_pb2.GenerateResponse(
            request_id=self.request.request_id, text=text, reasoning_text=reasoning, token_ids=token_ids,
            logprobs=logprobs, tool_calls=calls
        )
        if not self._sent_first_message:
            message.prompt_tokens = len(self.request.prompt_token_ids)
            if self.request.sampling.HasField("prompt_logprobs"):  # the whole prompt is computed by now
                message.prompt_logprobs.extend(
                    self._prompt_logprobs[p] for p in range(1, len(self.request.prompt_token_ids))
                    if p in self._prompt_logprobs)
            self._sent_first_message = True
        if self.finish is not None:
            message.finish_reason = self.finish.reason
            message.stop_reason = self.finish.stop_reason
            message.thought = self._thought
        return message

    @property
    def _thought(self) -> bool:
        """Whether the split output has thought so far (False when it is not split)."""
        return self._reasoning is not None and self._reasoning.thought

    def _split(self, text: str) -> tuple[str, str]:
        """The thinking and the answer of the final ``text`` (all answer without a parser); what may begin a
        marker is held back until the next piece, or the finish, tells."""
        if self._reasoning is None:
            return "", text
        split = self._reasoning.feed(text)
        if self.finish is not None:
            split = split.then(self._reasoning.finish())
        return split.reasoning, split.content

    def _parse_calls(self, text: str, final: bool) -> tuple[str, list[generation_pb2.ToolCall]]:
        """The answer ``text`` less its tool calls, and the calls completed (no parsing: all text); what may begin a
        call is held back until the next piece, or the finish, tells."""
        if self._calls is None:
            return text, []
        return self._calls.feed(text, final)

    def final_fields(self, message: generation_pb2.GenerateResponse, now: float) -> None:
        """Fill usage and timings into the request's last message."""
        message.usage.prompt_tokens = len(self.request.prompt_token_ids)
        message.usage.completion_tokens = self.request.num_output_tokens
        message.usage.num_preemptions = self.request.num_preemptions
        message.usage.cached_prompt_tokens = self.request.num_cached_prompt_tokens
        message.usage.accepted_prediction_tokens = self.spec.prediction_accepted
        message.usage.rejected_prediction_tokens = self.spec.prediction_rejected
        message.timings.CopyFrom(self.timing.to_proto(now, self.request.num_output_tokens))
        if self.spec.verify_steps or self.spec.steps_per_k:  # dynamic K may have chosen 0 for every step
            message.spec.CopyFrom(self.spec.to_proto())

    def abort_message(self, now: float) -> generation_pb2.GenerateResponse:
        """The last message of a request aborted before it finished."""
        text, calls = self._parse_calls("", final=True)  # what the parser held is sent, not dropped
        message = generation_pb2.GenerateResponse(
            request_id=self.request.request_id, finish_reason=FinishReason.FINISH_REASON_ABORT,
            thought=self._thought, text=text, tool_calls=calls
        )
        self.final_fields(message, now)
        paced = self._pacer.pace(message, final=True)  # with what was held for the stream interval
        assert paced is not None
        return paced
