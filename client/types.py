"""Result types of the client: plain frozen dataclasses converted from the wire protos."""

from __future__ import annotations

from dataclasses import Field, asdict, dataclass
from typing import Any, ClassVar

from client.errors import InternalError
from stepahead_proto import generation_pb2

_FINISH_REASONS: dict[int, str | None] = {
    generation_pb2.FINISH_REASON_UNSPECIFIED: None,
    generation_pb2.FINISH_REASON_STOP: "stop",
    generation_pb2.FINISH_REASON_LENGTH: "length",
    generation_pb2.FINISH_REASON_ABORT: "abort",
}


def finish_reason_name(value: int) -> str | None:
    """Map a FinishReason enum value to "stop", "length", "abort" or None (not finished)."""
    if value not in _FINISH_REASONS:
        raise InternalError(f"server sent an unknown finish_reason {value}")
    return _FINISH_REASONS[value]


class _AsDict:
    """Adds to_dict() to a dataclass: plain dicts, lists and numbers, ready for json.dumps."""

    __dataclass_fields__: ClassVar[dict[str, Field[Any]]]  # set by @dataclass on each subclass

    def to_dict(self) -> dict[str, Any]:
        """The fields as a dict (nested dataclasses become dicts, tuples stay sequences)."""
        return asdict(self)


@dataclass(frozen=True)
class TokenLogprob:
    """The log-probability of one token."""

    token_id: int
    logprob: float


@dataclass(frozen=True)
class PositionLogprobs:
    """Logprobs at one position: the sampled token (for prompt logprobs, the prompt's own token) and the top
    alternatives, most likely first."""

    sampled: TokenLogprob
    top: tuple[TokenLogprob, ...]

    @classmethod
    def from_proto(cls, msg: generation_pb2.PositionLogprobs) -> PositionLogprobs:
        """Build from a PositionLogprobs message."""
        return cls(
            sampled=TokenLogprob(msg.sampled.token_id, msg.sampled.logprob),
            top=tuple(TokenLogprob(t.token_id, t.logprob) for t in msg.top),
        )


@dataclass(frozen=True)
class Usage(_AsDict):
    """Token counts of a finished request."""

    prompt_tokens: int
    completion_tokens: int
    num_preemptions: int
    cached_prompt_tokens: int = 0
    """Prompt tokens found in the server's prefix cache (not computed for this request)."""
    accepted_prediction_tokens: int = 0
    """With the prediction option: draft tokens taken from the prediction that the output confirmed."""
    rejected_prediction_tokens: int = 0
    """With the prediction option: draft tokens taken from the prediction that the output did not confirm."""

    @property
    def total_tokens(self) -> int:
        """Prompt plus completion tokens."""
        return self.prompt_tokens + self.completion_tokens

    @classmethod
    def from_proto(cls, msg: generation_pb2.Usage) -> Usage:
        """Build from a Usage message."""
        return cls(msg.prompt_tokens, msg.completion_tokens, msg.num_preemptions, msg.cached_prompt_tokens,
                   msg.accepted_prediction_tokens, msg.rejected_prediction_tokens)


@dataclass(frozen=True)
class Timings(_AsDict):
    """Server-measured latencies of a finished request, in seconds."""

    queue_s: float
    ttft_s: float
    itl_mean_s: float
    itl_p50_s: float
    itl_max_s: float
    e2e_s: float

    @classmethod
    def from_proto(cls, msg: generation_pb2.Timings) -> Timings:
        """Build from a Timings message."""
        return cls(msg.queue_s, msg.ttft_s, msg.itl_mean_s, msg.itl_p50_s, msg.itl_max_s, msg.e2e_s)


@dataclass(frozen=True)
class SpecStats(_AsDict):
    """What speculative decoding did for one request."""

    drafted: int
    accepted: int
    accepted_per_position: tuple[int, ...]
    mean_acceptance_length: float
    verify_steps: int
    steps_per_k: tuple[int, ...] = ()
    """steps_per_k[k]: decode steps that verified k drafts (the K the scheduler chose; dynamic K varies it)."""
    mean_k: float = 0.0
    """Mean K over the request's decode steps."""
    tried_per_position: tuple[int, ...] = ()
    """tried_per_position[i]: verify steps with a draft slot at position i and positions 0..i-1 accepted."""

    @classmethod
    def from_proto(cls, msg: generation_pb2.SpecStats) -> SpecStats:
        """Build from a SpecStats message."""
        return cls(msg.drafted, msg.accepted, tuple(msg.accepted_per_position), msg.mean_acceptance_length,
                   msg.verify_steps, tuple(msg.steps_per_k), msg.mean_k, tuple(msg.tried_per_position))


@dataclass(frozen=True)
class ToolCall(_AsDict):
    """A tool call the server parsed from the output (--tool-call-parser): its id, the function and its arguments
    (a JSON object's text; ``json.loads`` it)."""

    id: str
    name: str
    arguments: str

    @classmethod
    def from_proto(cls, msg: generation_pb2.ToolCall) -> ToolCall:
        """Build from a ToolCall message."""
        return cls(msg.id, msg.name, msg.arguments_json)


@dataclass(frozen=True)
class GenerationChunk(_AsDict):
    """One message of a generation stream: the output produced since the previous chunk.

    `finish_reason`, `usage` and `timings` are set on the last chunk only; `prompt_tokens`
    on the first (0 elsewhere), and so is `prompt_logprobs` (empty elsewhere). `stop_reason` is
    the stop string or stop token id (as text) that ended the request, or None.
    """

    request_id: str
    text: str
    token_ids: tuple[int, ...]
    logprobs: tuple[PositionLogprobs, ...]
    finish_reason: str | None
    stop_reason: str | None
    usage: Usage | None
    timings: Timings | None
    prompt_tokens: int
    spec: SpecStats | None = None
    prompt_logprobs: tuple[PositionLogprobs, ...] = ()
    """With the prompt_logprobs option, on the first chunk: the logprobs of prompt tokens 1..n-1 (token 0 has no
    context), in order; each position's `sampled` is the prompt's own token."""
    reasoning_text: str = ""
    """New thinking, when the server's --reasoning-parser splits the output (a chat prompt's, or split_reasoning);
    `text` is then the answer alone."""
    thought: bool = False
    """On the last chunk of a split output: whether it thought (an empty thinking block counts)."""
    tool_calls: tuple[ToolCall, ...] = ()
    """Tool calls completed since the previous chunk, when the output is parsed for them (parse_tool_calls); their
    text is not in `text`."""

    @property
    def finished(self) -> bool:
        """True on the last chunk of a stream."""
        return self.finish_reason is not None

    @classmethod
    def from_proto(cls, msg: generation_pb2.GenerateResponse) -> GenerationChunk:
        """Build from a GenerateResponse message."""
        return cls(
            request_id=msg.request_id,
            text=msg.text,
            token_ids=tuple(msg.token_ids),
            logprobs=tuple(PositionLogprobs.from_proto(p) for p in msg.logprobs),
            finish_reason=finish_reason_name(msg.finish_reason),
            stop_reason=msg.stop_reason or None,
            usage=Usage.from_proto(msg.usage) if msg.HasField("usage") else None,
            timings=Timings.from_proto(msg.timings) if msg.HasField("timings") else None,
            prompt_tokens=msg.prompt_tokens,
            spec=SpecStats.from_proto(msg.spec) if msg.HasField("spec") else None,
            prompt_logprobs=tuple(PositionLogprobs.from_proto(p) for p in msg.prompt_logprobs),
            reasoning_text=msg.reasoning_text,
            thought=msg.thought,
            tool_calls=tuple(ToolCall.from_proto(call) for call in msg.tool_calls),
        )


@dataclass(frozen=True)
class GenerationResult(_AsDict):
    """A whole generation: the concatenation of its stream's chunks."""

    request_id: str
    text: str
    token_ids: tuple[int, ...]
    logprobs: tuple[PositionLogprobs, ...]
    finish_reason: str
    stop_reason: str | None
    usage: Usage | None
    timings: Timings | None
    prompt_tokens: int
    spec: SpecStats | None = None
    prompt_logprobs: tuple[PositionLogprobs, ...] = ()
    """With the prompt_logprobs option: the logprobs of prompt tokens 1..n-1 (token 0 has no context), in order,
    each position's `sampled` the prompt's own token; empty when not asked."""
    reasoning: str | None = None
    """The thinking the server's --reasoning-parser split off (`text` is then the answer alone); None when the output
    did not think or was not split."""
    tool_calls: tuple[ToolCall, ...] = ()
    """The tool calls parsed from the output (a server with --tool-call-parser, a chat prompt with tools), in output
    order; `text` is then what is not a call. Empty: no call, or the output was not parsed."""


class ResultBuilder:
    """Accumulates the chunks of one stream into a GenerationResult."""

    def __init__(self) -> None:
        self._request_id = ""
        self._texts: list[str] = []
        self._reasoning: list[str] = []
        self._tool_calls: list[ToolCall] = []
        self._token_ids: list[int] = []
        self._logprobs: list[PositionLogprobs] = []
        self._prompt_logprobs: tuple[PositionLogprobs, ...] = ()
        self._prompt_tokens = 0
        self._last: GenerationChunk | None = None

    def add(self, chunk: GenerationChunk) -> None:
        """Append one chunk (in stream order)."""
        self._request_id = self._request_id or chunk.request_id
        self._texts.append(chunk.text)
        self._reasoning.append(chunk.reasoning_text)
        self._tool_calls.extend(chunk.tool_calls)
        self._token_ids.extend(chunk.token_ids)
        self._logprobs.extend(chunk.logprobs)
        self._prompt_tokens = self._prompt_tokens or chunk.prompt_tokens
        self._prompt_logprobs = self._prompt_logprobs or chunk.prompt_logprobs
        self._last = chunk

    def build(self) -> GenerationResult:
        """Return the result; raises InternalError if the stream never sent its final chunk."""
        last = self._last
        if last is None or last.finish_reason is None:
            raise InternalError("the generation stream ended without a finish_reason")
        prompt_tokens = self._prompt_tokens or (last.usage.prompt_tokens if last.usage else 0)
        return GenerationResult(
            request_id=self._request_id,
            text="".join(self._texts),
            token_ids=tuple(self._token_ids),
            logprobs=tuple(self._logprobs),
            finish_reason=last.finish_reason,
            stop_reason=last.stop_reason,
            usage=last.usage,
            timings=last.timings,
            prompt_tokens=prompt_tokens,
            spec=last.spec,
            prompt_logprobs=self._prompt_logprobs,
            reasoning="".join(self._reasoning) if last.thought else None,
            tool_calls=tuple(self._tool_calls),
        )


@dataclass(frozen=True)
class EngineStats(_AsDict):
    """Engine counters since the server started."""

    steps: int = 0
    executor_busy_s: float = 0.0
    executor_bubble_s: float = 0.0
    num_preemptions: int = 0
    spec_drafted: int = 0
    spec_accepted: int = 0
    executor_draft_s: float = 0.0
    executor_forward_s: float = 0.0
    scheduler_invocations: int = 0
    step_requests: int = 0
    scheduler_cpu_s: float = 0.0
    prefix_cache_queried_tokens: int = 0
    prefix_cache_hit_tokens: int = 0
    executor_bubble_awaiting_step_s: float = 0.0
    result_delivery_s: float = 0.0
    step_delivery_s: float = 0.0

    @classmethod
    def from_proto(cls, msg: generation_pb2.EngineStats) -> EngineStats:
        """Build from an EngineStats message."""
        return cls(msg.steps, msg.executor_busy_s, msg.executor_bubble_s, msg.num_preemptions,
                   msg.spec_drafted, msg.spec_accepted, msg.executor_draft_s, msg.executor_forward_s,
                   msg.scheduler_invocations, msg.step_requests, msg.scheduler_cpu_s,
                   msg.prefix_cache_queried_tokens, msg.prefix_cache_hit_tokens, msg.executor_bubble_awaiting_step_s,
                   msg.result_delivery_s, msg.step_delivery_s)


@dataclass(frozen=True)
class ModelInfo(_AsDict):
    """What the server serves, and its load right now."""

    model: str
    max_model_len: int
    vocab_size: int
    eos_token_ids: tuple[int, ...]
    block_size: int
    num_kv_blocks: int
    num_free_kv_blocks: int
    num_running: int
    num_waiting: int
    stats: EngineStats = EngineStats()
    server_version: str = ""
    """The server's stepahead version (empty from a server older than the field)."""
    lora_adapters: tuple[str, ...] = ()
    """The LoRA adapters served on top of the model, in the server's order: each is a valid ``model`` of a
    generation (empty: none, or a server older than the field)."""
    max_loras: int = 0
    """LoRA adapter slots of each executor group: how many adapters can be served at once (0: LoRA off)."""
    reasoning_parser: str = ""
    """The server's --reasoning-parser, which splits chat outputs' thinking from their answer (empty: none)."""
    format_after_thinking: bool = False
    """Whether a split request's structured output waits for the thinking and constrains the answer alone (false: it
    constrains the whole output)."""
    tool_call_parser: str = ""
    """The server's --tool-call-parser, which parses tool calls out of chat outputs with tools (empty: none)."""

    @classmethod
    def from_proto(cls, msg: generation_pb2.ModelInfo) -> ModelInfo:
        """Build from a ModelInfo message."""
        return cls(
            model=msg.model,
            max_model_len=msg.max_model_len,
            vocab_size=msg.vocab_size,
            eos_token_ids=tuple(msg.eos_token_ids),
            block_size=msg.block_size,
            num_kv_blocks=msg.num_kv_blocks,
            num_free_kv_blocks=msg.num_free_kv_blocks,
            num_running=msg.num_running,
            num_waiting=msg.num_waiting,
            stats=EngineStats.from_proto(msg.stats),
            server_version=msg.server_version,
            lora_adapters=tuple(msg.lora_adapters),
            max_loras=msg.max_loras,
            reasoning_parser=msg.reasoning_parser,
            format_after_thinking=msg.format_after_thinking,
            tool_call_parser=msg.tool_call_parser,
        )


@dataclass(frozen=True)
class TokenizeResult(_AsDict):
    """A prompt's tokens as the server's model reads them (chat template applied), and its length limit."""

    token_ids: tuple[int, ...]
    max_model_len: int
    """Longest prompt + output in tokens: a prompt of at least this many tokens is refused by generate."""

    @property
    def count(self) -> int:
        """Number of prompt tokens."""
        return len(self.token_ids)

    @classmethod
    def from_proto(cls, msg: generation_pb2.TokenizeResponse) -> TokenizeResult:
        """Build from a TokenizeResponse message."""
        return cls(token_ids=tuple(msg.token_ids), max_model_len=msg.max_model_len)
