"""Response bodies and stream chunks of both endpoints, built from the engine's GenerateResponse messages.

``finish_reason`` is "stop" (EOS, a stop token or a stop string), "length" (max_tokens or the
context limit) or, for a request aborted on the server, "abort". ``usage`` counts each prompt
once however many samples it has, and every choice's completion tokens.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from scheduler_svc.http.conversion import GenerationPlan
from scheduler_svc.http.logprobs import TokenTexts, chat_logprobs, completion_logprobs
from stepahead_proto import generation_pb2

FINISH_REASONS = {
    generation_pb2.FINISH_REASON_STOP: "stop",
    generation_pb2.FINISH_REASON_LENGTH: "length",
    generation_pb2.FINISH_REASON_ABORT: "abort",
}


@dataclass
class _Choice:
    text_parts: list[str] = field(default_factory=list)
    logprobs: list[Any] = field(default_factory=list)
    token_offset: int = 0
    """Characters of the token texts so far (completion logprobs' text_offset)."""
    finish_reason: str | None = None
    completion_tokens: int = 0


class ResponseBuilder:
    """Turns one HTTP request's engine messages into OpenAI chunks (streaming) or one body (not)."""

    def __init__(self, plan: GenerationPlan, texts: TokenTexts, response_id: str, created: int) -> None:
        self.plan = plan
        self.texts = texts
        self.chat = plan.endpoint == "chat"
        self._choices = [_Choice() for _ in plan.requests]
        self._prompt_tokens: dict[int, int] = {}
        self._cached_tokens: dict[int, int] = {}
        self._head: dict[str, Any] = {
            "id": response_id,
            "object": "chat.completion.chunk" if self.chat else "text_completion",
            "created": created,
            "model": plan.model,
        }

    # ---- accounting --------------------------------------------------------------------------
    def _account(self, index: int, item: generation_pb2.GenerateResponse) -> _Choice:
        choice = self._choices[index]
        if item.prompt_tokens:
            self._prompt_tokens[self.plan.prompt_index[index]] = item.prompt_tokens
        if item.finish_reason != generation_pb2.FINISH_REASON_UNSPECIFIED:
            choice.finish_reason = FINISH_REASONS.get(item.finish_reason, "stop")
            choice.completion_tokens = item.usage.completion_tokens
            prompt_index = self.plan.prompt_index[index]
            self._prompt_tokens[prompt_index] = item.usage.prompt_tokens
            cached = max(self._cached_tokens.get(prompt_index, 0), item.usage.cached_prompt_tokens)
            self._cached_tokens[prompt_index] = cached
        return choice

    def usage(self) -> dict[str, Any]:
        """OpenAI's usage object over every choice (a prompt sampled n times counts once, with its most cached
        tokens)."""
        prompt = sum(self._prompt_tokens.values())
        completion = sum(choice.completion_tokens for choice in self._choices)
        return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion,
                "prompt_tokens_details": {"cached_tokens": sum(self._cached_tokens.values())}}

    # ---- streaming ---------------------------------------------------------------------------
    def role_chunk(self) -> dict[str, Any]:
        """The chat stream's first chunk: every choice's ``delta.role``."""
        choices = [
            {"index": index, "delta": {"role": "assistant", "content": ""}, "logprobs": None, "finish_reason": None}
            for index in range(len(self._choices))
        ]
        return self._chunk(choices)

    def chunk(self, index: int, item: generation_pb2.GenerateResponse) -> dict[str, Any] | None:
        """The chunk for one engine message of choice ``index``; None when it carries nothing to send."""
        choice = self._account(index, item)
        if not item.text and choice.finish_reason is None and not (item.logprobs and self.plan.logprobs is not None):
            return None
        logprobs = self._logprobs(choice, item) if self.plan.logprobs is not None else None
        if self.chat:
            delta = {"content": item.text} if item.text else {}
            body = {"index": index, "delta": delta, "logprobs": logprobs, "finish_reason": choice.finish_reason}
        else:
            body = {"index": index, "text": item.text, "logprobs": logprobs, "finish_reason": choice.finish_reason}
        return self._chunk([body])

    def usage_chunk(self) -> dict[str, Any]:
        """The last chunk with ``stream_options.include_usage``: no choices, the usage."""
        return {**self._head, "choices": [], "usage": self.usage()}

    def _chunk(self, choices: list[dict[str, Any]]) -> dict[str, Any]:
        chunk = {**self._head, "choices": choices}
        if self.plan.include_usage:
            chunk["usage"] = None
        return chunk

    # ---- whole responses ---------------------------------------------------------------------
    def add(self, index: int, item: generation_pb2.GenerateResponse) -> None:
        """Collect one engine message of choice ``index`` for :meth:`body`."""
        choice = self._account(index, item)
        if self.plan.logprobs is not None:
            logprobs = self._logprobs(choice, item)
            choice.logprobs.extend(logprobs["content"] if self.chat else [logprobs])
        choice.text_parts.append(item.text)

    def body(self) -> dict[str, Any]:
        """The non-streaming response."""
        choices = []
        for index, choice in enumerate(self._choices):
            text = "".join(choice.text_parts)
            logprobs: dict[str, Any] | None = None
            if self.plan.logprobs is not None:
                logprobs = {"content": choice.logprobs} if self.chat else _merge_completion_logprobs(choice.logprobs)
            if self.chat:
                entry: dict[str, Any] = {"index": index, "message": {"role": "assistant", "content": text}}
            else:
                entry = {"index": index, "text": text}
            entry.update(logprobs=logprobs, finish_reason=choice.finish_reason)
            choices.append(entry)
        obj = "chat.completion" if self.chat else "text_completion"
        return {**self._head, "object": obj, "choices": choices, "usage": self.usage()}

    def _logprobs(self, choice: _Choice, item: generation_pb2.GenerateResponse) -> dict[str, Any]:
        if self.chat:
            return {"content": chat_logprobs(self.texts, item.logprobs)}
        logprobs = completion_logprobs(self.texts, item.logprobs, choice.token_offset)
        if logprobs["tokens"]:
            choice.token_offset = logprobs["text_offset"][-1] + len(logprobs["tokens"][-1])
        return logprobs


def _merge_completion_logprobs(parts: list[dict[str, Any]]) -> dict[str, Any]:
    merged: dict[str, list[Any]] = {"tokens": [], "token_logprobs": [], "top_logprobs": [], "text_offset": []}
    for part in parts:
        for key, values in merged.items():
            values.extend(part[key])
    return merged
