"""Response bodies and stream chunks of both endpoints, built from the engine's GenerateResponse messages.

``finish_reason`` is "stop" (EOS, a stop token or a stop string), "length" (max_tokens or the
context limit) or, for a request aborted on the server, "abort"; a whole response's choices also carry vLLM's
``stop_reason`` (the stop string, or the stop token id as text, that ended it; null otherwise). ``usage`` counts
each prompt once however many samples it has, and every choice's completion tokens. With vLLM's
``stream_options.continuous_usage_stats``, every chunk but the final usage chunk carries ``usage`` as vLLM computes
it: the prompt's tokens, and the completion tokens its choice has generated so far (0 in the chat role chunk).
A request with a ``prediction`` (OpenAI's predicted outputs) gets OpenAI's ``usage.completion_tokens_details`` with
``accepted_prediction_tokens`` and ``rejected_prediction_tokens``, summed over its choices (in the whole response and
the final usage chunk; continuous usage stays vLLM's); without one, usage has no such key.

Chat's ``echo`` (vLLM's): the last message's content goes before each choice's content (with tool calls too, as
its ``content``); streamed, after the role chunk, one chunk per choice whose delta is that content.

The prompt's logprobs come with a choice's first engine message. vLLM's ``prompt_logprobs`` go on each completion
choice (``choices[i].prompt_logprobs``) and, for chat, on the response itself, as vLLM places them (never streamed:
the request refuses that). With ``echo``, a completion choice's text starts with the prompt (a token-id prompt
decoded, special tokens kept; a prompt ``truncate_prompt_tokens`` cut, the text of the tokens kept, which the model
read) and its ``logprobs`` with the prompt's tokens (those kept); a stream sends both in the choice's
first chunk, ``text_offset`` counting on from the prompt's token texts.

Tool calls (tools.py): a named function's call is the message's one tool call (``content: null``); streamed, the
first chunk of each choice carries its header (id, type, name, ``arguments: ""``) and later chunks append the
arguments as they are generated. Calls of tool_choice "required" are parsed once the choice has finished; streamed,
they come in one chunk before the choice's finish chunk. Tool_choice "auto" (``--tool-call-parser``, the parser
tool_calls/parsers.py names): the finished text is parsed into content and calls (the parser's parse_output);
streamed (its stream_parser), content goes out as it is generated until a call may be starting, each call in a
chunk of its own once it is complete (``index`` its place among the calls), and the finish chunk says "tool_calls"
once a call was sent.

Thinking (the server's --reasoning-parser, free-text chats): the engine splits each choice's output into its
thinking and the rest, which is the content (or, tool_choice "auto", what calls are parsed from); the message carries
the thinking as ``reasoning`` and ``reasoning_content`` (null when the output did not think), stream deltas as the
same two keys, before the content of the same delta. vLLM's ``include_reasoning: false`` leaves it out.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from scheduler_svc.http.conversion import GenerationPlan
from scheduler_svc.http.logprobs import (
    TokenTexts,
    chat_logprobs,
    completion_logprobs,
    echo_logprobs,
    prompt_logprobs,
)
from scheduler_svc.http.tools import ToolCalling, output_calls, tool_call
from scheduler_svc.tool_calls.common import CallStream, StreamDelta, new_call_id
from scheduler_svc.tool_calls.parsers import tool_call_parser
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
    stop_reason: str | None = None
    """The stop string or stop token id (as text) that ended the choice, as vLLM's ``stop_reason``; None: EOS, or
    not stopped."""
    completion_tokens: int = 0
    """The engine's count, from the choice's last message."""
    accepted_prediction_tokens: int = 0
    """Of the request's prediction, draft tokens the output confirmed (the engine's count, from the last message)."""
    rejected_prediction_tokens: int = 0
    """Of the request's prediction, draft tokens the output did not confirm (likewise)."""
    tokens_so_far: int = 0
    """Tokens of the messages so far (continuous usage, before the last message)."""
    started: bool = False
    """Whether the choice's first engine message (the one with the prompt's logprobs) has come."""
    prompt_logprobs: list[Any] | None = None
    """vLLM's ``prompt_logprobs`` of the choice's prompt (when the plan asks for them), from its first message."""
    echo_text: str = ""
    """The echoed prompt, not sent yet (it goes before the first message's text)."""
    echo_logprobs: dict[str, Any] | None = None
    """The echoed prompt's completion logprobs, not sent yet."""
    tool_call_id: str = ""
    """The id of the named function's call (tool_choice naming a function)."""
    calls_parser: CallStream | None = None
    """The stream's parser of calls in the text (tool_choice "auto")."""
    reasoning_parts: list[str] = field(default_factory=list)
    """The thinking the engine split off so far (GenerateResponse.reasoning_text)."""
    thought: bool = False
    """Whether the output thought (from its last message)."""


class ResponseBuilder:
    """Turns one HTTP request's engine messages into OpenAI chunks (streaming) or one body (not).

    ``prompt_token_ids``: each choice's prompt as the engine reads it (needed for ``echo``).
    """

    def __init__(self, plan: GenerationPlan, texts: TokenTexts, response_id: str, created: int,
                 prompt_token_ids: Sequence[Sequence[int]] = ()) -> None:
        self.plan = plan
        self.texts = texts
        self.chat = plan.endpoint == "chat"
        self._prompt_token_ids = prompt_token_ids
        self._echo_texts: dict[int, str] = {}
        """Each prompt's echoed text, by prompt index (its samples share it)."""
        calling = plan.tool_calling
        named = calling is not None and calling.mode == "named"
        self._choices = [_Choice(tool_call_id=new_call_id() if named else "", calls_parser=_calls_parser(calling))
                         for _ in plan.requests]
        self._prompt_tokens: dict[int, int] = {}
        self._cached_tokens: dict[int, int] = {}
        self._predicted = any(request.HasField("prediction") for request in plan.requests)
        """Whether the request gave a prediction: its usage then counts how the prediction fared."""
        self._head: dict[str, Any] = {
            "id": response_id,
            "object": "chat.completion.chunk" if self.chat else "text_completion",
            "created": created,
            "model": plan.model,
        }

    # ---- accounting --------------------------------------------------------------------------
    def _account(self, index: int, item: generation_pb2.GenerateResponse) -> _Choice:
        choice = self._choices[index]
        if not choice.started:
            choice.started = True
            self._take_prompt(index, choice, item)
        if item.prompt_tokens:
            self._prompt_tokens[self.plan.prompt_index[index]] = item.prompt_tokens
        choice.tokens_so_far += len(item.token_ids)
        if item.finish_reason != generation_pb2.FINISH_REASON_UNSPECIFIED:
            choice.finish_reason = FINISH_REASONS.get(item.finish_reason, "stop")
            choice.stop_reason = item.stop_reason or None
            choice.thought = item.thought
            choice.completion_tokens = item.usage.completion_tokens
            choice.accepted_prediction_tokens = item.usage.accepted_prediction_tokens
            choice.rejected_prediction_tokens = item.usage.rejected_prediction_tokens
            prompt_index = self.plan.prompt_index[index]
            self._prompt_tokens[prompt_index] = item.usage.prompt_tokens
            cached = max(self._cached_tokens.get(prompt_index, 0), item.usage.cached_prompt_tokens)
            self._cached_tokens[prompt_index] = cached
        return choice

    def _take_prompt(self, index: int, choice: _Choice, item: generation_pb2.GenerateResponse) -> None:
        """From a choice's first message: its prompt logprobs, and what ``echo`` puts before its output."""
        plan = self.plan
        if plan.prompt_logprobs is not None:
            choice.prompt_logprobs = prompt_logprobs(self.texts, item.prompt_logprobs, plan.prompt_logprobs)
        if not plan.echo:
            return
        request = plan.requests[index]
        prompt_ids = list(self._prompt_token_ids[index])
        prompt_index = plan.prompt_index[index]
        if prompt_index not in self._echo_texts:
            self._echo_texts[prompt_index] = self._echo_text(request, prompt_ids)
        choice.echo_text = self._echo_texts[prompt_index]
        if plan.logprobs is not None:
            choice.echo_logprobs = echo_logprobs(self.texts, prompt_ids[0], item.prompt_logprobs, plan.logprobs,
                                                 plan.tokens_as_ids)
            last = item.prompt_logprobs[-1].sampled.token_id if item.prompt_logprobs else prompt_ids[0]
            choice.token_offset = choice.echo_logprobs["text_offset"][-1] + len(self.texts.get(last)[0])

    def _echo_text(self, request: generation_pb2.GenerateRequest, prompt_ids: list[int]) -> str:
        """The prompt ``echo`` puts before the output: a text prompt as written, unless truncate_prompt_tokens cut
        some of it; else the text of the tokens the model read (``prompt_ids``, special tokens kept)."""
        if request.WhichOneof("prompt") == "text":
            if not request.HasField("truncate_prompt_tokens"):
                return request.text
            if self.texts.decode(prompt_ids, skip_special_tokens=True) == request.text:
                return request.text  # nothing was cut (or only special tokens, such as a BOS, which the text lacks)
        return self.texts.decode(prompt_ids)

    def _take_echo(self, choice: _Choice) -> tuple[str, dict[str, Any] | None]:
        """The echoed prompt and its logprobs not sent yet ("", None: none, or already sent)."""
        echoed = choice.echo_text, choice.echo_logprobs
        choice.echo_text, choice.echo_logprobs = "", None
        return echoed

    def _prompt_count(self, index: int) -> int:
        """The prompt tokens of choice ``index``: the engine's count, or before its first message the prompt's ids."""
        known = self._prompt_tokens.get(self.plan.prompt_index[index])
        if known is None and index < len(self._prompt_token_ids):
            known = len(self._prompt_token_ids[index])
        return known or 0

    def usage(self) -> dict[str, Any]:
        """OpenAI's usage object over every choice (a prompt sampled n times counts once, with its most cached
        tokens); with a prediction, its accepted and rejected tokens over every choice too."""
        prompt = sum(self._prompt_tokens.values())
        completion = sum(choice.completion_tokens for choice in self._choices)
        usage: dict[str, Any] = {
            "prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": sum(self._cached_tokens.values())}}
        if self._predicted:
            usage["completion_tokens_details"] = {
                "accepted_prediction_tokens": sum(choice.accepted_prediction_tokens for choice in self._choices),
                "rejected_prediction_tokens": sum(choice.rejected_prediction_tokens for choice in self._choices)}
        return usage

    # ---- streaming ---------------------------------------------------------------------------
    def role_chunk(self) -> dict[str, Any]:
        """The chat stream's first chunk: every choice's ``delta.role`` (and a named function's call header)."""
        choices = [
            {"index": index, "delta": self._first_delta(choice), "logprobs": None, "finish_reason": None}
            for index, choice in enumerate(self._choices)
        ]
        return self._chunk(choices)

    def echo_chunks(self) -> list[dict[str, Any]]:
        """vLLM's chat ``echo`` streamed: after the role chunk, a chunk per choice whose delta is the echoed content
        (none when nothing is echoed)."""
        echoed = self.plan.echo_content
        if not echoed:
            return []
        return [self._chunk([{"index": index, "delta": {"content": echoed}, "logprobs": None, "finish_reason": None}])
                for index in range(len(self._choices))]

    def _first_delta(self, choice: _Choice) -> dict[str, Any]:
        calling = self.plan.tool_calling
        if calling is None:
            return {"role": self.plan.response_role, "content": ""}
        delta: dict[str, Any] = {"role": self.plan.response_role, "content": None}
        if calling.mode == "named":
            delta["tool_calls"] = [{"index": 0, **tool_call(calling.function, "", choice.tool_call_id)}]
        return delta

    def chunks(self, index: int, item: generation_pb2.GenerateResponse) -> list[dict[str, Any]]:
        """The chunks for one engine message of choice ``index`` (none when it carries nothing to send)."""
        choice = self._account(index, item)
        echo_text, echo_logprobs_ = self._take_echo(choice)
        if (not (item.text or item.reasoning_text or echo_text or echo_logprobs_) and choice.finish_reason is None
                and not (item.logprobs and self.plan.logprobs is not None)):
            return []
        logprobs = self._logprobs(choice, item) if self.plan.logprobs is not None else None
        if self.chat:
            return self._chat_chunks(index, choice, item, logprobs)
        if echo_logprobs_ is not None and logprobs is not None:
            logprobs = _merge_completion_logprobs([echo_logprobs_, logprobs])
        body = {"index": index, "text": echo_text + item.text, "logprobs": logprobs,
                "finish_reason": choice.finish_reason}
        return [self._chunk([body])]

    def _chat_chunks(self, index: int, choice: _Choice, item: generation_pb2.GenerateResponse,
                     logprobs: dict[str, Any] | None) -> list[dict[str, Any]]:
        calling = self.plan.tool_calling
        text = item.text  # the answer: the engine split the thinking off (reasoning_text)
        reasoning = self._reasoning_fields(item.reasoning_text) if item.reasoning_text else {}
        delta: dict[str, Any]
        if calling is None:
            delta = {**reasoning, "content": text} if text else reasoning
            if not delta and choice.finish_reason is None and logprobs is None:
                return []  # all of it held back (a tag may be starting)
        elif calling.mode == "auto":
            return _with_reasoning(self._auto_chunks(index, choice, text, logprobs), reasoning,
                                   self._reasoning_chunk(index, logprobs))
        elif calling.mode == "named":
            delta = {**reasoning, "tool_calls": [{"index": 0, "function": {"arguments": text}}]} if text else reasoning
        else:  # "required": the calls are parsed once the output is whole
            choice.text_parts.append(text)
            if choice.finish_reason is not None:
                return _with_reasoning(self._required_calls_chunks(index, choice, logprobs), reasoning,
                                       self._reasoning_chunk(index, logprobs))
            if not reasoning and logprobs is None:
                return []
            delta = reasoning
        return [self._chunk([{"index": index, "delta": delta, "logprobs": logprobs,
                              "finish_reason": choice.finish_reason}])]

    def _reasoning_chunk(self, index: int,
                         logprobs: dict[str, Any] | None) -> Callable[[dict[str, Any]], dict[str, Any]]:
        """Makes the chunk of choice ``index`` that carries only the thinking's ``delta``."""
        return lambda delta: self._chunk([{"index": index, "delta": delta, "logprobs": logprobs,
                                           "finish_reason": None}])

    def _reasoning_fields(self, reasoning: str | None) -> dict[str, Any]:
        """The thinking under both of its names, unless the request left it out."""
        if not self.plan.include_reasoning:
            return {}
        return {"reasoning": reasoning, "reasoning_content": reasoning}

    def _required_calls_chunks(self, index: int, choice: _Choice,
                               logprobs: dict[str, Any] | None) -> list[dict[str, Any]]:
        """A finished choice of tool_choice "required": its calls, then its finish chunk (or, when the output does
        not parse, the output as content with the finish reason)."""
        assert self.plan.tool_calling is not None
        text = "".join(choice.text_parts)
        calls, finish_reason = output_calls(self.plan.tool_calling, text, choice.finish_reason)
        if calls is None:
            return [self._chunk([{"index": index, "delta": {"content": text} if text else {}, "logprobs": logprobs,
                                  "finish_reason": finish_reason}])]
        delta = {"tool_calls": [{"index": position, **call} for position, call in enumerate(calls)]}
        return [self._chunk([{"index": index, "delta": delta, "logprobs": logprobs, "finish_reason": None}]),
                self._chunk([{"index": index, "delta": {}, "logprobs": None, "finish_reason": finish_reason}])]

    def _auto_chunks(self, index: int, choice: _Choice, text: str,
                     logprobs: dict[str, Any] | None) -> list[dict[str, Any]]:
        """Tool_choice "auto": what the parser lets go (content, then a chunk per call); once the choice has
        finished, what it held and the finish chunk ("tool_calls" once a call was sent)."""
        parser = choice.calls_parser
        assert parser is not None
        sent = parser.feed(text)
        if choice.finish_reason is not None:
            sent = sent.then(parser.finish())
        deltas = _auto_deltas(sent, parser.calls_sent - len(sent.calls))
        finish_reason = None
        if choice.finish_reason is not None:
            finish_reason = "tool_calls" if parser.calls_sent else choice.finish_reason
            deltas.append({})
        elif not deltas and logprobs is not None:
            deltas.append({})
        return [self._chunk([{"index": index, "delta": delta, "logprobs": logprobs if position == 0 else None,
                              "finish_reason": finish_reason if position == len(deltas) - 1 else None}])
                for position, delta in enumerate(deltas)]

    def prompt_tokens(self, index: int) -> int:
        """The prompt tokens of choice ``index`` (known before its first message)."""
        return self._prompt_count(index)

    def stop_reason(self, index: int) -> str | None:
        """What stopped choice ``index`` (see _Choice.stop_reason), once it finished."""
        return self._choices[index].stop_reason

    def usage_chunk(self) -> dict[str, Any]:
        """The last chunk with ``stream_options.include_usage``: no choices, the usage."""
        return {**self._head, "choices": [], "usage": self.usage()}

    def _chunk(self, choices: list[dict[str, Any]]) -> dict[str, Any]:
        chunk = {**self._head, "choices": choices}
        if self.plan.continuous_usage:
            chunk["usage"] = self._usage_so_far([choice["index"] for choice in choices])
        elif self.plan.include_usage:
            chunk["usage"] = None
        return chunk

    def _usage_so_far(self, indices: list[int]) -> dict[str, int]:
        """vLLM's continuous usage of a chunk of these choices: their prompts' tokens (each once) and the tokens
        they have generated so far (a chunk of one choice, as vLLM sends, counts that choice's own)."""
        prompts = {self.plan.prompt_index[index]: index for index in indices}
        prompt = sum(self._prompt_count(index) for index in prompts.values())
        completion = 0
        for index in indices:
            choice = self._choices[index]
            completion += choice.completion_tokens if choice.finish_reason is not None else choice.tokens_so_far
        return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}

    # ---- whole responses ---------------------------------------------------------------------
    def add(self, index: int, item: generation_pb2.GenerateResponse) -> None:
        """Collect one engine message of choice ``index`` for :meth:`body`."""
        choice = self._account(index, item)
        echo_text, echo_logprobs_ = self._take_echo(choice)
        if echo_logprobs_ is not None:
            choice.logprobs.append(echo_logprobs_)
        if self.plan.logprobs is not None:
            logprobs = self._logprobs(choice, item)
            choice.logprobs.extend(logprobs["content"] if self.chat else [logprobs])
        choice.text_parts += [echo_text, item.text]
        choice.reasoning_parts.append(item.reasoning_text)

    def body(self) -> dict[str, Any]:
        """The non-streaming response."""
        choices = []
        for index, choice in enumerate(self._choices):
            text = "".join(choice.text_parts)
            logprobs: dict[str, Any] | None = None
            if self.plan.logprobs is not None:
                logprobs = {"content": choice.logprobs} if self.chat else _merge_completion_logprobs(choice.logprobs)
            finish_reason = choice.finish_reason
            if self.chat:
                message, finish_reason = self._message(choice, text)
                if self.plan.echo_content:
                    message["content"] = self.plan.echo_content + (message["content"] or "")
                entry: dict[str, Any] = {"index": index, "message": message}
            else:
                entry = {"index": index, "text": text}
            entry.update(logprobs=logprobs, finish_reason=finish_reason, stop_reason=choice.stop_reason)
            if self.plan.prompt_logprobs is not None and not self.chat:
                entry["prompt_logprobs"] = choice.prompt_logprobs
            choices.append(entry)
        obj = "chat.completion" if self.chat else "text_completion"
        body = {**self._head, "object": obj, "choices": choices, "usage": self.usage()}
        if self.plan.prompt_logprobs is not None and self.chat:  # one prompt: vLLM puts them on the response
            body["prompt_logprobs"] = self._choices[0].prompt_logprobs
        return body

    def _message(self, choice: _Choice, text: str) -> tuple[dict[str, Any], str | None]:
        """A chat choice's message (in the plan's response role) and finish reason: its text, or its tool calls."""
        message, finish_reason = self._message_as_assistant(choice, text)
        return {**message, "role": self.plan.response_role}, finish_reason

    def _message_as_assistant(self, choice: _Choice, text: str) -> tuple[dict[str, Any], str | None]:
        if self.plan.reasoning_parser is None:
            return self._answer(choice, text)
        reasoning = "".join(choice.reasoning_parts) if choice.thought else None
        message, finish_reason = self._answer(choice, text)
        if reasoning is not None and not message.get("content") and not message.get("tool_calls"):
            message["content"] = None  # it only thought (cut off before answering)
        return {**message, **self._reasoning_fields(reasoning)}, finish_reason

    def _answer(self, choice: _Choice, text: str) -> tuple[dict[str, Any], str | None]:
        """The message of the answer ``text``: its content, or its tool calls."""
        calling = self.plan.tool_calling
        if calling is None:
            return {"role": "assistant", "content": text}, choice.finish_reason
        if calling.mode == "auto":
            return _auto_message(calling, text, choice.finish_reason)
        calls, finish_reason = output_calls(calling, text, choice.finish_reason, choice.tool_call_id)
        if calls is None:
            return {"role": "assistant", "content": text}, finish_reason
        return {"role": "assistant", "content": None, "tool_calls": calls}, finish_reason

    def _logprobs(self, choice: _Choice, item: generation_pb2.GenerateResponse) -> dict[str, Any]:
        as_ids = self.plan.tokens_as_ids
        if self.chat:
            return {"content": chat_logprobs(self.texts, item.logprobs, as_ids)}
        logprobs = completion_logprobs(self.texts, item.logprobs, choice.token_offset, as_ids=as_ids)
        if item.logprobs:
            last = item.logprobs[-1].sampled.token_id
            choice.token_offset = logprobs["text_offset"][-1] + len(self.texts.get(last)[0])
        return logprobs


def _calls_parser(calling: ToolCalling | None) -> CallStream | None:
    if calling is None or calling.mode != "auto":
        return None
    return tool_call_parser(calling.parser).stream_parser(calling.names, calling.parallel)


def _with_reasoning(chunks: list[dict[str, Any]], reasoning: dict[str, Any],
                    new_chunk: Callable[[dict[str, Any]], dict[str, Any]]) -> list[dict[str, Any]]:
    """``chunks`` with the thinking fields put first in the first one's delta (or, with no chunk, in a chunk made by
    ``new_chunk(delta)``)."""
    if not reasoning:
        return chunks
    if not chunks:
        return [new_chunk(dict(reasoning))]
    first = chunks[0]["choices"][0]
    first["delta"] = {**reasoning, **first["delta"]}
    return chunks


def _auto_deltas(sent: StreamDelta, first_position: int) -> list[dict[str, Any]]:
    """A stream's deltas for what the parser let go: its content, then one delta per call."""
    deltas: list[dict[str, Any]] = [{"content": sent.content}] if sent.content else []
    for position, call in enumerate(sent.calls, first_position):
        deltas.append({"tool_calls": [{"index": position, **tool_call(call.name, call.arguments)}]})
    return deltas


def _auto_message(calling: ToolCalling, text: str, finish_reason: str | None) -> tuple[dict[str, Any], str | None]:
    """Tool_choice "auto": the message parsed from a finished choice's text, and its finish reason."""
    parsed = tool_call_parser(calling.parser).parse_output(text, calling.names, calling.parallel)
    if not parsed.calls:
        return {"role": "assistant", "content": parsed.content}, finish_reason
    calls = [tool_call(call.name, call.arguments) for call in parsed.calls]
    return {"role": "assistant", "content": parsed.content, "tool_calls": calls}, "tool_calls"


def _merge_completion_logprobs(parts: list[dict[str, Any]]) -> dict[str, Any]:
    merged: dict[str, list[Any]] = {"tokens": [], "token_logprobs": [], "top_logprobs": [], "text_offset": []}
    for part in parts:
        for key, values in merged.items():
            values.extend(part[key])
    return merged
