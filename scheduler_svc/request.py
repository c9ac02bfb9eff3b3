"""A generation request as the scheduler tracks it: token ids, progress and lifecycle."""

from __future__ import annotations

import enum
import time
from dataclasses import dataclass, field

from scheduler_svc.reasoning.thinking_bounds import ThinkingBounds
from scheduler_svc.tool_calls.request_parsing import ToolCallParsing
from stepahead_proto import sampling_pb2


class RequestStatus(enum.Enum):
    """Where a request is in its life."""

    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"


@dataclass(frozen=True)
class StopParams:
    """Resolved stopping rules of one request (defaults applied, validated)."""

    max_tokens: int
    min_tokens: int = 0
    stop: tuple[str, ...] = ()
    stop_token_ids: frozenset[int] = frozenset()
    eos_token_ids: frozenset[int] = frozenset()
    ignore_eos: bool = False
    include_stop_str_in_output: bool = False
    skip_special_tokens: bool = True


@dataclass
class Request:
    """One request's scheduling state. Token ids are plain ints; nothing here touches a tensor."""

    request_id: str
    prompt_token_ids: list[int]
    sampling: sampling_pb2.SamplingParams
    stop_params: StopParams
    arrival_time: float = field(default_factory=time.monotonic)
    priority: int = 0
    """Under the priority scheduling policy, lower values start first and are preempted last (ties: arrival)."""
    output_token_ids: list[int] = field(default_factory=list)
    num_computed_tokens: int = 0
    num_output_placeholders: int = 0
    """Tokens scheduled to be sampled whose results have not come back yet."""
    epoch: int = 0
    """Bumped on every preemption, so results of steps scheduled before it are recognised and dropped."""
    status: RequestStatus = RequestStatus.WAITING
    num_preemptions: int = 0
    sent_to_executor: bool = False
    """False until the executor holds this request's state (again, after a preemption)."""
    first_scheduled_time: float | None = None
    spec_enabled: bool = True
    """False when the request opted out of speculative decoding."""
    num_pending_drafts: int = 0
    """Drafts the executor will hold for this request after the last scheduled sampling step."""
    num_unresolved_drafts: int = 0
    """Drafts in steps still in flight: the executor may be that many tokens ahead of num_computed_tokens."""
    num_cached_prompt_tokens: int = 0
    """Prompt tokens found in the prefix cache when the request first started."""
    bad_words: tuple[tuple[int, ...], ...] = ()
    """SamplingParams.bad_words tokenized: the last token of each sequence is forbidden after the others."""
    lora_adapter: str = ""
    """The LoRA adapter the request runs with (GenerateRequest.model naming one); empty: the base model."""
    adapter_cache_key: str = ""
    """The adapter's prefix-cache key when the request was built (ServedAdapters.cache_key); empty: none."""
    reasoning_parser: str | None = None
    """The --reasoning-parser that splits the output's thinking from its answer (GenerateRequest.split_reasoning);
    None: the output is not split."""
    format_after_thinking: ThinkingBounds | None = None
    """Where the structured output format starts and what a thinking budget counts: these thinking markers (a split
    request's format constrains the answer alone); None: a format applies from the first output token."""
    tool_call_parsing: ToolCallParsing | None = None
    """How tool calls are parsed out of the answer (GenerateRequest.parse_tool_calls); None: they are not."""
    prediction_token_ids: list[int] = field(default_factory=list)
    """GenerateRequest.prediction tokenized (empty: none): the executor drafts from it."""
    prediction_on_track: bool = True
    """False once a verify step found the output off the prediction (its drafts rejected, or none found): the
    request then proposes one prediction draft per step, not K_max, until one is accepted again."""

    def observe_prediction(self, from_prediction: bool, num_drafted: int, num_accepted: int) -> None:
        """A verify step's verdict on drafts that came from the prediction (``from_prediction``) or did not (the
        output was off it, or the step had no draft): on track only while the prediction's drafts are all accepted."""
        self.prediction_on_track = from_prediction and num_accepted == num_drafted

    @property
    def num_tokens(self) -> int:
        """Prompt plus output tokens known to the scheduler."""
        return len(self.prompt_token_ids) + len(self.output_token_ids)

    @property
    def num_tokens_with_placeholders(self) -> int:
        """Tokens the scheduler plans with: known tokens plus those still being sampled."""
        return self.num_tokens + self.num_output_placeholders

    @property
    def num_output_tokens(self) -> int:
        return len(self.output_token_ids)

    @property
    def all_token_ids(self) -> list[int]:
        return self.prompt_token_ids + self.output_token_ids

    @property
    def priority_key(self) -> tuple[int, float]:
        """The order of the priority scheduling policy: smaller first."""
        return self.priority, self.arrival_time

    @property
    def is_finished(self) -> bool:
        return self.status is RequestStatus.FINISHED
