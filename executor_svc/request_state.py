"""What the executor keeps per request between steps, so a step only carries what changed."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from executor_svc.drafters.prediction import PredictedOutput
from executor_svc.sampling_metadata import RowSamplingParams
from executor_svc.thinking_phases import OutputFormat, ThinkingPhases
from stepahead_proto import executor_pb2


@dataclass(frozen=True)
class StopRule:
    """When the executor ends a request inside a multi-step batch (mirrors the scheduler's rules)."""

    max_tokens: int
    min_tokens: int = 0
    stop_token_ids: frozenset[int] = frozenset()
    max_model_len: int = 0
    """0: no length limit."""

    @classmethod
    def from_proto(cls, stop: executor_pb2.StopConditions) -> StopRule:
        return cls(stop.max_tokens, stop.min_tokens, frozenset(stop.stop_token_ids), stop.max_model_len)

    def ends_at(self, num_output: int, num_tokens: int, token_id: int) -> bool:
        """Whether a token ends the request: ``num_output``/``num_tokens`` count it already."""
        if num_output >= self.min_tokens and token_id in self.stop_token_ids:
            return True
        if self.max_tokens and num_output >= self.max_tokens:
            return True
        return bool(self.max_model_len) and num_tokens >= self.max_model_len


@dataclass
class ExecutorRequestState:
    """One request's tokens, block table and progress as the executor sees them.

    The executor appends every token it samples once it is read back, so the next step's input ids
    are resolved here (or, while a token is still unread, on the device), never sent by the scheduler.
    """

    request_id: str
    prompt_token_ids: list[int]
    output_token_ids: list[int]
    block_ids: list[int]
    params: RowSamplingParams
    num_computed_tokens: int = 0
    draft_token_ids: list[int] = field(default_factory=list)
    """Drafts proposed after the last step, to be verified by the next one."""
    num_unread_tokens: int = 0
    """Tokens sampled by launched steps but not read back to the host yet (they are the last ones;
    the newest is in the LastTokenBuffer)."""
    speculative: bool = False
    """True once drafts were asked for: from then on the executor's token count leads the scheduler's."""
    stop: StopRule | None = None
    """When the request ends (None: never stopped by the executor)."""
    stopped: bool = False
    """True once a multi-step sub-step met a stop condition: later sub-steps and steps skip it."""
    grammar: OutputFormat | None = None
    """Structured output's matcher or the thinking's phases (a format after it, a budget), fed every output token once
    it is on the host (None: free text, or nothing left to restrict)."""
    allowed_tokens: np.ndarray | None = None
    """allowed_token_ids as an int32 bit mask [words] (executor_svc.token_mask.token_bits); None: every token."""
    adapter_slot: int = -1
    """The slot of the LoRA adapter the request runs with (-1: the base model)."""
    prediction: PredictedOutput | None = None
    """The request's predicted output, which drafts before the drafter does (None: it gave none)."""
    drafts_from_prediction: bool = False
    """Whether draft_token_ids came from the prediction."""
    token_ids: list[int] = field(init=False)

    def __post_init__(self) -> None:
        self.token_ids = self.prompt_token_ids + self.output_token_ids

    @property
    def num_tokens(self) -> int:
        """Prompt and output tokens, counting those not read back yet."""
        return len(self.token_ids) + self.num_unread_tokens

    @property
    def num_output_tokens(self) -> int:
        """Output tokens, counting those not read back yet (the output position of the next one)."""
        return len(self.output_token_ids) + self.num_unread_tokens

    def append_output(self, token_id: int) -> None:
        self.output_token_ids.append(token_id)
        self.token_ids.append(token_id)
        if self.grammar is not None:
            self.grammar.consume([token_id])
            if isinstance(self.grammar, ThinkingPhases) and self.grammar.settled:
                self.grammar = None  # a budget's answer without a format: its steps may run ahead again
