"""Runs one StepRequest: updates per-request state, flattens the batch, forwards, samples."""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch
from stepahead_proto import executor_pb2, generation_pb2

from executor_svc.attention.metadata import AttentionMetadata
from executor_svc.kv_cache import PagedKVCache
from executor_svc.request_state import ExecutorRequestState
from executor_svc.sampler import RowLogprobs, Sampler
from executor_svc.sampling_metadata import RowSamplingParams, SamplingMetadata


class StepError(ValueError):
    """A StepRequest contradicts the executor's state (a scheduler bug or a protocol mismatch)."""


@dataclass
class FlatBatch:
    """The tensors of one flattened forward and which rows are sampled."""

    input_ids: torch.Tensor
    positions: torch.Tensor
    meta: AttentionMetadata
    scheduled: list[ExecutorRequestState]
    sample_rows: list[int]
    """Index into the flat tokens of the last token of each request that samples this step."""
    sampling_states: list[ExecutorRequestState]


class ModelRunner:
    """Holds the model, the paged KV cache and the sampler, and the state of every live request."""

    def __init__(self, model, kv_cache: PagedKVCache, block_size: int, vocab_size: int, device: torch.device) -> None:
        self.model = model
        self.kv_cache = kv_cache
        self.block_size = block_size
        self.vocab_size = vocab_size
        self.device = device
        self.sampler = Sampler()
        self.requests: dict[str, ExecutorRequestState] = {}

    # ---- state updates -------------------------------------------------------------------
    def _apply_updates(self, step: executor_pb2.StepRequest) -> list[tuple[ExecutorRequestState, int]]:
        for request_id in step.finished_request_ids:
            self.requests.pop(request_id, None)
        scheduled: list[tuple[ExecutorRequestState, int]] = []
        for new in step.new_requests:
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
            scheduled.append((state, new.num_scheduled_tokens))
        for cached in step.cached_requests:
            state = self.requests.get(cached.request_id)
            if state is None:
                raise StepError(f"cached_requests: {cached.request_id!r} is not on the executor")
            if cached.num_computed_tokens != state.num_computed_tokens:
                raise StepError(
                    f"cached_requests: {cached.request_id!r} num_computed_tokens {cached.num_computed_tokens} "
                    f"!= executor's {state.num_computed_tokens}"
                )
            state.block_ids.extend(cached.new_block_ids)
            scheduled.append((state, cached.num_scheduled_tokens))
        return scheduled

    # ---- batch -----------------------------------------------------------------------------
    def _flatten(self, scheduled: list[tuple[ExecutorRequestState, int]]) -> FlatBatch:
        input_ids: list[int] = []
        positions: list[int] = []
        query_lens: list[int] = []
        seq_lens: list[int] = []
        block_tables: list[list[int]] = []
        sample_rows: list[int] = []
        sampling_states: list[ExecutorRequestState] = []
        for state, num_tokens in scheduled:
            start = state.num_computed_tokens
            end = start + num_tokens
            if num_tokens < 1 or end > len(state.token_ids):
                raise StepError(
                    f"num_scheduled_tokens: {state.request_id!r} asks for tokens {start}..{end} but the executor "
                    f"knows {len(state.token_ids)}"
                )
            if len(state.block_ids) * self.block_size < end:
                raise StepError(f"block_ids: {state.request_id!r} has too few blocks for {end} tokens")
            input_ids.extend(state.token_ids[start:end])
            positions.extend(range(start, end))
            query_lens.append(num_tokens)
            seq_lens.append(end)
            block_tables.append(state.block_ids)
            if end == len(state.token_ids):
                sample_rows.append(len(input_ids) - 1)
                sampling_states.append(state)
        meta = AttentionMetadata.build(query_lens, seq_lens, block_tables, self.block_size, self.device)
        return FlatBatch(
            input_ids=torch.tensor(input_ids, dtype=torch.long, device=self.device),
            positions=torch.tensor(positions, dtype=torch.long, device=self.device),
            meta=meta,
            scheduled=[state for state, _ in scheduled],
            sample_rows=sample_rows,
            sampling_states=sampling_states,
        )

    # ---- step ------------------------------------------------------------------------------
    @torch.inference_mode()
    def execute(self, step: executor_pb2.StepRequest) -> executor_pb2.StepResult:
        """Run one step and return its result (one output per scheduled request, in order)."""
        start = time.time()
        scheduled = self._apply_updates(step)
        result = executor_pb2.StepResult(step_id=step.step_id, compute_start_s=start)
        if not scheduled:
            result.compute_end_s = time.time()
            return result
        batch = self._flatten(scheduled)
        hidden = self.model(batch.input_ids, batch.positions, batch.meta, self.kv_cache)
        forward_end = time.time()
        sampled: dict[str, tuple[int, RowLogprobs | None]] = {}
        if batch.sample_rows:
            sampled = self._sample(batch, hidden)
        for state, num_tokens in scheduled:
            state.num_computed_tokens += num_tokens
        end = time.time()
        for state in batch.scheduled:
            output = result.outputs.add(request_id=state.request_id)
            if state.request_id in sampled:
                token_id, logprobs = sampled[state.request_id]
                output.token_ids.append(token_id)
                if logprobs is not None:
                    output.logprobs.append(_logprobs_proto(token_id, logprobs))
        result.forward_s = forward_end - start
        result.sample_s = end - forward_end
        result.compute_end_s = end
        return result

    def _sample(self, batch: FlatBatch, hidden: torch.Tensor) -> dict[str, tuple[int, RowLogprobs | None]]:
        rows = torch.tensor(batch.sample_rows, dtype=torch.long, device=hidden.device)
        logits = self.model.compute_logits(hidden.index_select(0, rows))
        states = batch.sampling_states
        meta = SamplingMetadata.build(
            [s.params for s in states],
            [s.prompt_token_ids for s in states],
            [s.output_token_ids for s in states],
            self.vocab_size,
            self.device,
        )
        output = self.sampler(logits, meta)
        sampled = {}
        for state, token_id, logprobs in zip(states, output.token_ids, output.logprobs):
            state.append_output(token_id)
            sampled[state.request_id] = (token_id, logprobs)
        return sampled

    def reset(self) -> None:
        """Forget every request (a new Execute stream starts from nothing)."""
        self.requests.clear()


def _logprobs_proto(token_id: int, logprobs: RowLogprobs) -> generation_pb2.PositionLogprobs:
    return generation_pb2.PositionLogprobs(
        sampled=generation_pb2.TokenLogprob(token_id=token_id, logprob=logprobs.sampled_logprob),
        top=[
            generation_pb2.TokenLogprob(token_id=t, logprob=lp)
            for t, lp in zip(logprobs.top_ids, logprobs.top_logprobs)
        ],
    )
