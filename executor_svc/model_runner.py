"""Runs one StepRequest: updates per-request state, flattens the batch, forwards, samples or verifies
drafts, and proposes the next drafts."""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch
from stepahead_proto import executor_pb2, generation_pb2

from executor_svc.attention.metadata import AttentionMetadata
from executor_svc.drafters.base import DraftRequest, Drafter
from executor_svc.kv_cache import PagedKVCache
from executor_svc.rejection_sampler import RejectionSampler
from executor_svc.request_state import ExecutorRequestState
from executor_svc.sampler import RowLogprobs, Sampler
from executor_svc.sampling_metadata import RowSamplingParams, SamplingMetadata
from executor_svc.tracing import StepPhaseTracer

PAD_DRAFT = -1


class StepError(ValueError):
    """A StepRequest contradicts the executor's state (a scheduler bug or a protocol mismatch)."""


@dataclass
class ScheduledWork:
    """One request's part of a step."""

    state: ExecutorRequestState
    num_tokens: int
    """New tokens to compute (1 for a decode step), not counting drafts."""
    num_drafts: int
    """Draft slots to verify (the request's held drafts, padded with PAD_DRAFT)."""
    num_spec: int
    """Drafts to propose after sampling."""


@dataclass
class SamplingGroup:
    """The consecutive logits rows of one request that samples this step (1 + its draft slots)."""

    work: ScheduledWork
    first_row: int
    drafts: list[int]


@dataclass
class FlatBatch:
    """The tensors of one flattened forward and which rows are sampled."""

    input_ids: torch.Tensor
    positions: torch.Tensor
    meta: AttentionMetadata
    sample_rows: list[int]
    groups: list[SamplingGroup]


@dataclass
class Emitted:
    """What one request produced in a step."""

    token_ids: list[int]
    logprobs: list[RowLogprobs | None]
    num_drafted: int
    num_accepted: int


class ModelRunner:
    """Holds the model, the paged KV cache, the sampler and the drafter, and every live request's state."""

    def __init__(
        self,
        model,
        kv_cache: PagedKVCache,
        block_size: int,
        vocab_size: int,
        device: torch.device,
        drafter: Drafter | None = None,
        tracer: StepPhaseTracer | None = None,
    ) -> None:
        self.model = model
        self.kv_cache = kv_cache
        self.block_size = block_size
        self.vocab_size = vocab_size
        self.device = device
        self.drafter = drafter
        self.tracer = tracer or StepPhaseTracer()
        """Phase spans of traced steps; a no-op unless the server turned tracing on."""
        self.sampler = Sampler()
        self.rejection_sampler = RejectionSampler(self.sampler)
        self.requests: dict[str, ExecutorRequestState] = {}

    # ---- state updates -------------------------------------------------------------------
    def _apply_updates(self, step: executor_pb2.StepRequest) -> list[ScheduledWork]:
        for request_id in step.finished_request_ids:
            self._drop(request_id)
        work = [self._add_new(new) for new in step.new_requests]
        work += [self._update_cached(cached) for cached in step.cached_requests]
        return work

    def _add_new(self, new: executor_pb2.NewRequestData) -> ScheduledWork:
        if new.request_id in self.requests:
            raise StepError(f"new_requests: {new.request_id!r} is already on the executor")
        state = ExecutorRequestState(
            request_id=new.request_id,
            prompt_token_ids=list(new.prompt_token_ids),
            output_token_ids=list(new.output_token_ids),
            block_ids=list(new.block_ids),
            params=RowSamplingParams.from_proto(new.sampling),
            num_computed_tokens=new.num_computed_tokens,
        )
        self.requests[new.request_id] = state
        return ScheduledWork(state, new.num_scheduled_tokens, 0, new.num_spec_tokens)

    def _update_cached(self, cached: executor_pb2.CachedRequestData) -> ScheduledWork:
        state = self.requests.get(cached.request_id)
        if state is None:
            raise StepError(f"cached_requests: {cached.request_id!r} is not on the executor")
        # With speculation the scheduler plans before it knows how many drafts were accepted:
        # the executor's own count is the truth then.
        if not state.speculative and cached.num_computed_tokens != state.num_computed_tokens:
            raise StepError(
                f"cached_requests: {cached.request_id!r} num_computed_tokens {cached.num_computed_tokens} "
                f"!= executor's {state.num_computed_tokens}"
            )
        state.block_ids.extend(cached.new_block_ids)
        return ScheduledWork(state, cached.num_scheduled_tokens, cached.num_draft_tokens, cached.num_spec_tokens)

    def _drop(self, request_id: str) -> None:
        self.requests.pop(request_id, None)
        if self.drafter is not None:
            self.drafter.drop(request_id)

    # ---- batch -----------------------------------------------------------------------------
    def _flatten(self, work: list[ScheduledWork]) -> FlatBatch:
        input_ids: list[int] = []
        positions: list[int] = []
        query_lens: list[int] = []
        seq_lens: list[int] = []
        block_tables: list[list[int]] = []
        sample_rows: list[int] = []
        groups: list[SamplingGroup] = []
        for item in work:
            tokens, drafts = self._step_tokens(item)
            start = item.state.num_computed_tokens
            end = start + len(tokens)
            if len(item.state.block_ids) * self.block_size < end:
                raise StepError(f"block_ids: {item.state.request_id!r} has too few blocks for {end} tokens")
            first_flat = len(input_ids)
            input_ids.extend(tokens)
            positions.extend(range(start, end))
            query_lens.append(len(tokens))
            seq_lens.append(end)
            block_tables.append(item.state.block_ids)
            if start + item.num_tokens == len(item.state.token_ids):
                groups.append(SamplingGroup(item, len(sample_rows), drafts))
                last_real = first_flat + item.num_tokens - 1
                sample_rows.extend(range(last_real, last_real + len(drafts) + 1))
        meta = AttentionMetadata.build(query_lens, seq_lens, block_tables, self.block_size, self.device)
        return FlatBatch(
            input_ids=torch.tensor(input_ids, dtype=torch.long, device=self.device),
            positions=torch.tensor(positions, dtype=torch.long, device=self.device),
            meta=meta,
            sample_rows=sample_rows,
            groups=groups,
        )

    def _step_tokens(self, item: ScheduledWork) -> tuple[list[int], list[int]]:
        """The input ids of this step (known tokens, then drafts) and the draft slots (padded)."""
        state = item.state
        start = state.num_computed_tokens
        end = start + item.num_tokens
        if item.num_tokens < 1 or end > len(state.token_ids):
            raise StepError(
                f"num_scheduled_tokens: {state.request_id!r} asks for tokens {start}..{end} but the executor "
                f"knows {len(state.token_ids)}"
            )
        if item.num_drafts and end != len(state.token_ids):
            raise StepError(f"num_draft_tokens: {state.request_id!r} verifies drafts before its prompt is done")
        drafts = state.draft_token_ids[: item.num_drafts]
        drafts = drafts + [PAD_DRAFT] * (item.num_drafts - len(drafts))
        # A padded slot still needs some input id; it is always rejected, so any id will do.
        return state.token_ids[start:end] + [d if d >= 0 else 0 for d in drafts], drafts

    # ---- step ------------------------------------------------------------------------------
    @torch.inference_mode()
    def execute(self, step: executor_pb2.StepRequest) -> executor_pb2.StepResult:
        """Run one step and return its result (one output per scheduled request, in order)."""
        start = time.time()
        work = self._apply_updates(step)
        result = executor_pb2.StepResult(step_id=step.step_id, compute_start_s=start)
        if not work:
            result.compute_end_s = time.time()
            return result
        batch = self._flatten(work)
        hidden = self.model(batch.input_ids, batch.positions, batch.meta, self.kv_cache)
        forward_end = time.time()
        emitted = self._sample(batch, hidden) if batch.groups else {}
        for item in work:
            if item.state.request_id not in emitted:
                item.state.num_computed_tokens += item.num_tokens
        sample_end = time.time()
        self._propose(batch.groups)
        end = time.time()
        for item in work:
            output = result.outputs.add(request_id=item.state.request_id)
            produced = emitted.get(item.state.request_id)
            if produced is not None:
                output.token_ids.extend(produced.token_ids)
                output.num_drafted = produced.num_drafted
                output.num_accepted = produced.num_accepted
                output.logprobs.extend(
                    _logprobs_proto(t, lp) for t, lp in zip(produced.token_ids, produced.logprobs) if lp is not None
                )
        result.forward_s = forward_end - start
        result.sample_s = sample_end - forward_end
        result.draft_s = end - sample_end
        result.compute_end_s = end
        self.tracer.record(step, result)
        return result

    def _sample(self, batch: FlatBatch, hidden: torch.Tensor) -> dict[str, Emitted]:
        rows = torch.tensor(batch.sample_rows, dtype=torch.long, device=hidden.device)
        logits = self.model.compute_logits(hidden.index_select(0, rows))
        meta = self._sampling_metadata(batch.groups)
        verified = self.rejection_sampler(logits, meta, [group.drafts for group in batch.groups])
        emitted = {}
        for group, tokens, num_accepted, lps in zip(
            batch.groups, verified.token_ids, verified.num_accepted, verified.logprobs
        ):
            state = group.work.state
            state.num_computed_tokens += group.work.num_tokens + num_accepted
            for token in tokens:
                state.append_output(token)
            state.draft_token_ids = []
            drafted = sum(1 for d in group.drafts if d != PAD_DRAFT)
            emitted[state.request_id] = Emitted(tokens, lps, drafted, num_accepted)
        return emitted

    def _sampling_metadata(self, groups: list[SamplingGroup]) -> SamplingMetadata:
        """One row per logits row: row j of a request sees its outputs plus drafts 1..j (for penalties
        and for the seed's output position)."""
        params, prompts, outputs = [], [], []
        for group in groups:
            state = group.work.state
            real = [d for d in group.drafts if d != PAD_DRAFT]
            for j in range(len(group.drafts) + 1):
                params.append(state.params)
                prompts.append(state.prompt_token_ids)
                # Row 0 (the only row without drafts) reads the request's own list: no copy per step.
                outputs.append(state.output_token_ids + real[:j] if j else state.output_token_ids)
        return SamplingMetadata.build(params, prompts, outputs, self.vocab_size, self.device)

    def _propose(self, groups: list[SamplingGroup]) -> None:
        wanting = [group.work for group in groups if group.work.num_spec > 0]
        if self.drafter is None or not wanting:
            return
        for item in wanting:
            needed = len(item.state.token_ids) + item.num_spec - 1
            if len(item.state.block_ids) * self.block_size < needed:
                raise StepError(f"block_ids: {item.state.request_id!r} has too few blocks for drafts up to {needed}")
            item.state.speculative = True
        proposals = self.drafter.propose([DraftRequest(item.state, item.num_spec) for item in wanting])
        for item, drafts in zip(wanting, proposals):
            item.state.draft_token_ids = list(drafts[: item.num_spec])

    def reset(self) -> None:
        """Forget every request (a new Execute stream starts from nothing)."""
        self.requests.clear()
        if self.drafter is not None:
            self.drafter.reset()


def _logprobs_proto(token_id: int, logprobs: RowLogprobs) -> generation_pb2.PositionLogprobs:
    return generation_pb2.PositionLogprobs(
        sampled=generation_pb2.TokenLogprob(token_id=token_id, logprob=logprobs.sampled_logprob),
        top=[
            generation_pb2.TokenLogprob(token_id=t, logprob=lp)
            for t, lp in zip(logprobs.top_ids, logprobs.top_logprobs)
        ],
    )
