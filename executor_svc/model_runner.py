"""Runs one StepRequest: updates per-request state, flattens the batch, forwards, samples or verifies
drafts, and proposes the next drafts.

A step is *launched* (forward and sampling queued on the device) and later *completed* (its tokens
read back and its StepResult built). With ``defer_readback`` a plain step (no drafts to verify or
propose, no penalties) is left unsettled at launch: the next step may launch before its tokens reach
the host, taking each request's last token from the LastTokenBuffer on the device. Any other step
settles every earlier step before it runs and settles itself at launch.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Sequence

import numpy as np
import torch

from executor_svc.bad_words import banned_tokens, deferrable_with
from executor_svc.cuda_graphs.step_graphs import StepGraphs
from executor_svc.drafters.base import Drafter, DraftRequest
from executor_svc.drafters.prediction import PredictedOutput
from executor_svc.grammar import GrammarCompiler, GrammarError, RequestGrammar
from executor_svc.host_batch import HostBatch
from executor_svc.host_transfer import host_list_to_device
from executor_svc.kv_cache import PagedKVCache
from executor_svc.last_token_buffer import LastTokenBuffer
from executor_svc.lora.served_adapters import AdapterChange, ServedLoraAdapters
from executor_svc.multi_step import MultiStepBatch, MultiStepError, check_pure_decode, mark_stops
from executor_svc.penalties import row_has_penalty
from executor_svc.prompt_logprobs import PromptRows, prompt_rows, score_prompt_rows, wants_prompt_logprobs
from executor_svc.rejection_sampler import RejectionSampler, accept_drafts
from executor_svc.request_state import ExecutorRequestState, StopRule
from executor_svc.sampler import DeviceSamplerOutput, Sampler
from executor_svc.sampling_metadata import RowSamplingParams, SamplingMetadata
from executor_svc.step_forward import StepForward
from executor_svc.step_result import fill_outputs
from executor_svc.step_work import (
    Emitted,
    FlatBatch,
    LaunchedStep,
    PendingSamples,
    SamplingGroup,
    ScheduledWork,
)
from executor_svc.thinking_phases import OutputFormat, ThinkingPhases
from executor_svc.token_mask import TokenMask, allows_every_token, token_allowed, token_bits
from executor_svc.tracing import StepPhaseTracer
from stepahead_proto import executor_pb2

PAD_DRAFT = -1


class StepError(ValueError):
    """A StepRequest contradicts the executor's state (a scheduler bug or a protocol mismatch)."""


def _check_ids_below(ids: Sequence[int], limit: int, request_id: str, field: str) -> None:
    """StepError naming the field unless every id is in [0, limit): an id outside would index past the
    embedding or the KV cache (on CUDA, a write past a kernel's buffer that nothing checks)."""
    if ids and (min(ids) < 0 or max(ids) >= limit):
        bad = next(value for value in ids if not 0 <= value < limit)
        raise StepError(f"{field}: {request_id!r} has id {bad}, outside [0, {limit})")


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
        defer_readback: bool = False,
        graphs: StepGraphs | None = None,
        grammars: GrammarCompiler | None = None,
        lora: ServedLoraAdapters | None = None,
    ) -> None:
        """``graphs``: captured decode/verify forwards of ``model`` over ``kv_cache`` (None: always eager);
        ``grammars``: compiles structured output formats (None: requests asking for one are refused);
        ``lora``: the LoRA adapters ``model`` serves (None: none)."""
        self.model = model
        self.kv_cache = kv_cache
        self.block_size = block_size
        self.vocab_size = vocab_size
        self.device = device
        self.drafter = drafter
        self.grammars = grammars
        self.lora = lora
        self.tracer = tracer or StepPhaseTracer()
        """Phase spans of traced steps; a no-op unless the server turned tracing on."""
        self.defer_readback = defer_readback
        self.sampler = Sampler()
        self.rejection_sampler = RejectionSampler(self.sampler)
        self.requests: dict[str, ExecutorRequestState] = {}
        self.last_tokens = LastTokenBuffer(device)
        self.forward = StepForward(model, kv_cache, self.last_tokens, device, graphs)
        self._unsettled: deque[LaunchedStep] = deque()
        self._multi_step: MultiStepBatch | None = None
        """The multi-step StepRequest whose sub-steps are running (None between them)."""

    # ---- state updates -------------------------------------------------------------------
    def _apply_updates(self, step: executor_pb2.StepRequest) -> list[ScheduledWork]:
        for request_id in step.finished_request_ids:
            self._drop(request_id)
        work = [self._add_new(new) for new in step.new_requests]
        for cached in step.cached_requests:
            item = self._update_cached(cached)
            if item is not None:
                work.append(item)
        return work

    def _add_new(self, new: executor_pb2.NewRequestData) -> ScheduledWork:
        if new.request_id in self.requests:
            raise StepError(f"new_requests: {new.request_id!r} is already on the executor")
        for field in ("prompt_token_ids", "output_token_ids"):
            _check_ids_below(getattr(new, field), self.vocab_size, new.request_id, field)
        _check_ids_below(new.block_ids, self.kv_cache.num_blocks, new.request_id, "block_ids")
        state = ExecutorRequestState(
            request_id=new.request_id,
            prompt_token_ids=list(new.prompt_token_ids),
            output_token_ids=list(new.output_token_ids),
            block_ids=list(new.block_ids),
            params=RowSamplingParams.from_proto(new.sampling, [list(words.ids) for words in new.bad_words]),
            num_computed_tokens=new.num_computed_tokens,
            stop=StopRule.from_proto(new.stop) if new.HasField("stop") else None,
        )
        self._check_token_lists(new, state.params)
        if new.lora_adapter:
            state.adapter_slot = self._adapter_slot(new)
        if new.sampling.allowed_token_ids:
            state.allowed_tokens = token_bits(new.sampling.allowed_token_ids, self.vocab_size)
        state.grammar = self._request_grammar(new)
        if new.prediction_token_ids:
            _check_ids_below(new.prediction_token_ids, self.vocab_size, new.request_id, "prediction_token_ids")
            state.prediction = PredictedOutput(list(new.prediction_token_ids))
        self.requests[new.request_id] = state
        self.last_tokens.assign(new.request_id)
        if new.num_computed_tokens and self.drafter is not None:
            self.drafter.adopt_cached_prefix(new.request_id, new.num_computed_tokens)
        return ScheduledWork(state, new.num_scheduled_tokens, 0, new.num_spec_tokens)

    def _adapter_slot(self, new: executor_pb2.NewRequestData) -> int:
        slot = self.lora.slot_of(new.lora_adapter) if self.lora is not None else None
        if slot is None:
            served = list(self.lora.names) if self.lora is not None and self.lora.names else "none"
            raise StepError(f"lora_adapter: {new.request_id!r} names {new.lora_adapter!r}; served adapters: {served}")
        return slot

    def load_lora_adapter(self, name: str, path: str) -> AdapterChange:
        """Serve the adapter at ``path`` as ``name`` from the next step on (a runner method, so tensor-parallel
        ranks mirror it)."""
        if self.lora is None:
            return AdapterChange("FAILED_PRECONDITION", "LoRA is off on this executor (start it with --max-loras N "
                                 "or --lora-modules)", ())
        return self.lora.load(name, path)

    def unload_lora_adapter(self, name: str) -> AdapterChange:
        """Stop serving ``name`` (the scheduler sends no request naming it any more)."""
        if self.lora is None:
            return AdapterChange("NOT_FOUND", f"adapter {name!r} is not loaded; LoRA is off on this executor", ())
        return self.lora.unload(name)

    def _check_token_lists(self, new: executor_pb2.NewRequestData, params: RowSamplingParams) -> None:
        """StepError naming the field when a token id the request lists is outside the vocabulary."""
        lists = {
            "sampling.logit_bias": [token for token, _ in params.logit_bias],
            "sampling.allowed_token_ids": list(new.sampling.allowed_token_ids),
            "bad_words": [token for words in params.bad_words for token in words],
        }
        for field, tokens in lists.items():
            outside = [token for token in tokens if not 0 <= token < self.vocab_size]
            if outside:
                raise StepError(f"new_requests: {new.request_id!r} {field} token id {outside[0]} is outside the "
                                f"vocabulary [0, {self.vocab_size})")

    def _request_grammar(self, new: executor_pb2.NewRequestData) -> OutputFormat | None:
        """The request's format matcher and thinking phases, past the outputs it arrives with (a resumed request);
        None when nothing restricts its output."""
        budget = new.sampling.thinking_token_budget if new.sampling.HasField("thinking_token_budget") else None
        if budget is not None and not new.HasField("format_after_thinking"):
            raise StepError(f"new_requests: {new.request_id!r} sampling.thinking_token_budget needs "
                            "format_after_thinking (the tokens that end the thinking)")
        matcher = self._format_matcher(new) if new.sampling.HasField("structured_output") else None
        grammar: OutputFormat
        if new.HasField("format_after_thinking") and (matcher is not None or budget is not None):
            grammar = self._phases(new, matcher, budget)
        elif matcher is not None:
            grammar = matcher
        else:
            return None
        grammar.consume(list(new.output_token_ids))
        settled = isinstance(grammar, ThinkingPhases) and grammar.settled
        return None if settled else grammar

    def _format_matcher(self, new: executor_pb2.NewRequestData) -> RequestGrammar:
        if self.grammars is None:
            raise StepError(f"new_requests: {new.request_id!r} asks for structured output, which this executor "
                            "cannot apply (no tokenizer.json beside the model)")
        try:
            return self.grammars.request_grammar(new.sampling.structured_output)
        except GrammarError as error:
            raise StepError(f"new_requests: {new.request_id!r} {error}") from error

    def _phases(self, new: executor_pb2.NewRequestData, matcher: RequestGrammar | None,
                budget: int | None) -> ThinkingPhases:
        after = new.format_after_thinking
        header_end = [after.header_end_token_id] if after.HasField("header_end_token_id") else []
        outside = [token for token in [*after.end_token_ids, *after.opener_token_ids, *header_end]
                   if not 0 <= token < self.vocab_size]
        if not after.end_token_ids or outside:
            problem = f"token id {outside[0]} is outside the vocabulary" if outside else "end_token_ids is empty"
            raise StepError(f"new_requests: {new.request_id!r} format_after_thinking: {problem}")
        if budget is not None and budget < 0:
            raise StepError(f"new_requests: {new.request_id!r} sampling.thinking_token_budget: {budget}; at least 0")
        return ThinkingPhases(matcher, self.vocab_size, list(after.end_token_ids), list(after.opener_token_ids),
                              header_end[0] if header_end else None, budget)

    def _update_cached(self, cached: executor_pb2.CachedRequestData) -> ScheduledWork | None:
        """The request's share of the step; None for a request the executor stopped (a multi-step batch
        ended it after the scheduler had planned this step)."""
        state = self.requests.get(cached.request_id)
        if state is None:
            raise StepError(f"cached_requests: {cached.request_id!r} is not on the executor")
        if state.stopped:
            return None
        # With speculation the scheduler plans before it knows how many drafts were accepted:
        # the executor's own count is the truth then.
        if not state.speculative and cached.num_computed_tokens != state.num_computed_tokens:
            raise StepError(
                f"cached_requests: {cached.request_id!r} num_computed_tokens {cached.num_computed_tokens} "
                f"!= executor's {state.num_computed_tokens}"
            )
        _check_ids_below(cached.new_block_ids, self.kv_cache.num_blocks, cached.request_id, "new_block_ids")
        state.block_ids.extend(cached.new_block_ids)
        return ScheduledWork(state, cached.num_scheduled_tokens, cached.num_draft_tokens, cached.num_spec_tokens)

    def _drop(self, request_id: str) -> None:
        self.requests.pop(request_id, None)
        self.last_tokens.release(request_id)
        if self.drafter is not None:
            self.drafter.drop(request_id)

    # ---- batch -----------------------------------------------------------------------------
    def _flatten(self, work: list[ScheduledWork]) -> FlatBatch:
        host = HostBatch(self.block_size)
        sample_rows: list[int] = []
        groups: list[SamplingGroup] = []
        prompt_scoring: list[PromptRows] = []
        for item in work:
            tokens, drafts = self._step_tokens(item)
            start = item.state.num_computed_tokens
            end = start + len(tokens)
            if len(item.state.block_ids) * self.block_size < end:
                raise StepError(f"block_ids: {item.state.request_id!r} has too few blocks for {end} tokens")
            first_flat = host.add_sequence(tokens, start, item.state.block_ids, item.state.adapter_slot)
            scoring = prompt_rows(item.state, start, item.num_tokens, first_flat)
            if scoring is not None:
                prompt_scoring.append(scoring)
            if item.state.num_unread_tokens:
                # Its input is the token the previous step sampled: read it on the device.
                host.unread_rows.append(first_flat)
                host.unread_slots.append(self.last_tokens.slot(item.state.request_id))
            if start + item.num_tokens == item.state.num_tokens:
                groups.append(SamplingGroup(item, drafts, bool(drafts) and item.state.drafts_from_prediction))
                last_real = first_flat + item.num_tokens - 1
                sample_rows.extend(range(last_real, last_real + len(drafts) + 1))
        return FlatBatch(host=host, sample_rows=sample_rows, groups=groups, prompt_rows=prompt_scoring)

    def _step_tokens(self, item: ScheduledWork) -> tuple[list[int], list[int]]:
        """The input ids of this step (known tokens, then drafts) and the draft slots (padded).

        A token the executor sampled but has not read back yet is given as 0 here; _flatten puts the
        real one in on the device."""
        state = item.state
        start = state.num_computed_tokens
        end = start + item.num_tokens
        if item.num_tokens < 1 or end > state.num_tokens:
            raise StepError(
                f"num_scheduled_tokens: {state.request_id!r} asks for tokens {start}..{end} but the executor "
                f"knows {state.num_tokens}"
            )
        if item.num_drafts and end != state.num_tokens:
            raise StepError(f"num_draft_tokens: {state.request_id!r} verifies drafts before its prompt is done")
        drafts = state.draft_token_ids[: item.num_drafts]
        drafts = drafts + [PAD_DRAFT] * (item.num_drafts - len(drafts))
        known = state.token_ids[start:end] + [0] * (end - max(start, len(state.token_ids)))
        # A padded slot still needs some input id; it is always rejected, so any id will do.
        return known + [d if d >= 0 else 0 for d in drafts], drafts

    # ---- step ------------------------------------------------------------------------------
    def execute(self, step: executor_pb2.StepRequest) -> executor_pb2.StepResult:
        """Run one step and return its result (one output per scheduled request, in order)."""
        return self.complete(self.launch(step))

    @torch.inference_mode()
    def launch(self, step: executor_pb2.StepRequest) -> LaunchedStep:
        """Queue one step's forward and sampling; settle it too unless it may be deferred."""
        start = time.time()
        work = self._apply_updates(step)
        result = executor_pb2.StepResult(step_id=step.step_id, compute_start_s=start)
        launched = LaunchedStep(step, work, [], result)
        if not work:
            launched.settled = True
            self._finish_launch(launched, start, start, start)
            return launched
        deferred = self.defer_readback and all(self._can_defer(item) for item in work)
        if not deferred:
            self.settle_all()
        batch = self._flatten(work)
        result.num_device_input_ids = len(batch.host.unread_rows)
        if batch.prompt_rows:  # their logits come from the same pass over the LM head
            scored_rows = [row for scoring in batch.prompt_rows for row in scoring.flat_rows]
            logits = self.forward.sampled_logits(batch.host, batch.sample_rows + scored_rows)
            launched.prompt_logprobs = score_prompt_rows(logits[len(batch.sample_rows):], batch.prompt_rows)
            logits = logits[: len(batch.sample_rows)]
        else:
            logits = self.forward.sampled_logits(batch.host, batch.sample_rows)
        self._show_drafter_hidden(work, batch)
        forward_end = time.time()
        launched.groups = batch.groups
        if batch.groups:
            launched.pending = PendingSamples(self._sample(batch, logits, deferred))
        for item in work:
            if not item.num_drafts:  # with drafts, the count waits for the verdict (settling)
                item.state.num_computed_tokens += item.num_tokens
        for group in batch.groups:
            group.work.state.draft_token_ids = []
            if not group.drafts:
                group.work.state.num_unread_tokens += 1
        if deferred:
            self._unsettled.append(launched)
        else:
            self._settle(launched)  # every earlier step was settled above
        sample_end = time.time()
        if not deferred:
            self._propose(batch.groups)
        self._finish_launch(launched, start, forward_end, sample_end)
        return launched

    def _show_drafter_hidden(self, work: list[ScheduledWork], batch: FlatBatch) -> None:
        """Hand a drafter that reads the target's features the hidden rows of this step (it copies what it
        keeps: a graph's output buffer is rewritten by the next replay)."""
        hidden, slots = self.forward.last_hidden, self.forward.last_slots
        if self.drafter is None or not self.drafter.reads_target_hidden or hidden is None or slots is None:
            return
        self.drafter.observe(batch.host, [item.state.request_id for item in work], hidden, slots)

    def _can_defer(self, item: ScheduledWork) -> bool:
        """Whether the item needs nothing from the host copy of earlier steps' tokens."""
        state = item.state
        plain = (not item.num_drafts and not item.num_spec and not row_has_penalty(state.params)
                 and deferrable_with(state.params.bad_words, state.num_unread_tokens)
                 and state.grammar is None and not wants_prompt_logprobs(state))
        # An unread token can only be the single input of a decode.
        readable = not state.num_unread_tokens or (
            item.num_tokens == 1 and state.num_computed_tokens == state.num_tokens - 1)
        return plain and readable

    def _finish_launch(self, launched: LaunchedStep, start: float, forward_end: float, sample_end: float) -> None:
        end = time.time()
        launched.result.forward_s = forward_end - start
        launched.result.sample_s = sample_end - forward_end
        launched.result.draft_s = end - sample_end
        if launched.settled or not launched.groups:
            launched.computed_at = end

    def _sample(self, batch: FlatBatch, logits: torch.Tensor, deferred: bool) -> DeviceSamplerOutput:
        meta = self._sampling_metadata(batch.groups)
        sampled = self.rejection_sampler.sample_rows(logits, meta, [group.drafts for group in batch.groups])
        if deferred:
            slots = [self.last_tokens.slot(group.work.state.request_id) for group in batch.groups]
            self.last_tokens.write(host_list_to_device(slots, self.device), sampled.token_ids)
        return sampled

    def _sampling_metadata(self, groups: list[SamplingGroup]) -> SamplingMetadata:
        """One row per logits row: row j of a request sees its outputs plus drafts 1..j (for penalties, bad words,
        the seed's output position and a structured output's mask); allowed_token_ids masks every row."""
        params: list[RowSamplingParams] = []
        prompts, outputs, positions, unread = [], [], [], []
        masks: dict[int, np.ndarray] = {}
        for group in groups:
            state = group.work.state
            if state.grammar is not None:  # its earlier tokens are on the host: such steps are never deferred
                rows = enumerate(state.grammar.masks(group.drafts), start=len(params))
                masks.update((row, bits) for row, bits in rows if not allows_every_token(bits))
            if state.allowed_tokens is not None:
                for row in range(len(params), len(params) + len(group.drafts) + 1):
                    masks[row] = masks[row] & state.allowed_tokens if row in masks else state.allowed_tokens
            real = [d for d in group.drafts if d != PAD_DRAFT]
            for j in range(len(group.drafts) + 1):
                params.append(state.params)
                prompts.append(state.prompt_token_ids)
                # Row 0 (the only row without drafts) reads the request's own list: no copy per step.
                outputs.append(state.output_token_ids + real[:j] if j else state.output_token_ids)
                positions.append(state.num_output_tokens + j)
                unread.append(state.num_unread_tokens)
        return SamplingMetadata.build(params, prompts, outputs, self.vocab_size, self.device, positions,
                                      TokenMask.build(masks, self.device), unread, self._newest_tokens(groups))

    def _newest_tokens(self, groups: list[SamplingGroup]) -> torch.Tensor | None:
        """Per logits row, the request's newest output token on the device, when a request with bad words has
        tokens the host has not read (a step running ahead); None otherwise."""
        if not any(g.work.state.params.bad_words and g.work.state.num_unread_tokens for g in groups):
            return None
        slots = [self.last_tokens.slot(g.work.state.request_id) for g in groups for _ in range(len(g.drafts) + 1)]
        return self.last_tokens.read(host_list_to_device(slots, self.device))

    # ---- settling and completing -----------------------------------------------------------
    def settle_all(self) -> None:
        """Read back every launched step's tokens into the requests' host state, in step order."""
        while self._unsettled:
            self._settle(self._unsettled.popleft())

    def _settle(self, launched: LaunchedStep) -> None:
        launched.settled = True
        if launched.pending is None:
            return
        rows = launched.pending.to_host()
        launched.pending = None
        verified = accept_drafts(rows, [group.drafts for group in launched.groups])
        for group, tokens, num_accepted, lps in zip(
            launched.groups, verified.token_ids, verified.num_accepted, verified.logprobs
        ):
            state = group.work.state
            if group.drafts:
                state.num_computed_tokens += group.work.num_tokens + num_accepted
            else:
                state.num_unread_tokens -= 1
            for token in tokens:
                state.append_output(token)
            drafted = sum(1 for d in group.drafts if d != PAD_DRAFT)
            launched.emitted[state.request_id] = Emitted(tokens, lps, drafted, num_accepted, len(group.drafts),
                                                         group.from_prediction)

    def complete(self, launched: LaunchedStep) -> executor_pb2.StepResult:
        """Settle the step (and every step launched before it) and return its result."""
        while not launched.settled:
            self._settle(self._unsettled.popleft())
        if launched.computed_at is None:
            launched.computed_at = time.time()
        result = launched.result
        result.compute_end_s = launched.computed_at
        fill_outputs(result, launched.work, launched.emitted, launched.prompt_logprobs)
        self.tracer.record(launched.step, result)
        return result

    # ---- multi-step -------------------------------------------------------------------------
    def execute_sub_step(self, step: executor_pb2.StepRequest, sub_step: int) -> executor_pb2.StepResult:
        """Run sub-step ``sub_step`` of a multi-step StepRequest and return its (settled) result.

        Sub-step 0 runs the StepRequest as sent; later ones are planned from the host state the previous
        sub-step left. Requests meeting a stop condition are stopped and flagged ``finished``. When no
        request is left, the sub-step computes nothing and its result has no outputs.
        """
        if sub_step == 0:
            try:
                check_pure_decode(step)
            except MultiStepError as error:
                raise StepError(str(error)) from error
            self._multi_step = MultiStepBatch.start(step)
            sub_request = step
        elif self._multi_step is None or self._multi_step.step.step_id != step.step_id:
            raise StepError(f"sub_step: {sub_step} of step {step.step_id} runs before its sub-step 0")
        else:
            sub_request = self._multi_step.next_request(sub_step, self.requests, self.block_size)
        result = self.execute(sub_request)
        result.sub_step = sub_step
        mark_stops(result, self.requests)
        if sub_step == step.num_steps - 1:
            self._multi_step = None
        return result

    def _propose(self, groups: list[SamplingGroup]) -> None:
        wanting = [group.work for group in groups if group.work.num_spec > 0]
        if not wanting or (self.drafter is None and all(item.state.prediction is None for item in wanting)):
            return
        for item in wanting:
            needed = len(item.state.token_ids) + item.num_spec - 1
            if len(item.state.block_ids) * self.block_size < needed:
                raise StepError(f"block_ids: {item.state.request_id!r} has too few blocks for drafts up to {needed}")
            item.state.speculative = True
        for item, (drafts, from_prediction) in zip(wanting, self._proposals(wanting)):
            drafts = list(drafts[: item.num_spec])
            if item.state.grammar is not None:  # settled: steps of constrained requests are never deferred
                drafts = item.state.grammar.constrain_drafts(drafts, item.num_spec)
            item.state.draft_token_ids = drafts_before_forbidden(item.state, drafts)
            item.state.drafts_from_prediction = from_prediction and bool(item.state.draft_token_ids)

    def _proposals(self, wanting: list[ScheduledWork]) -> list[tuple[list[int], bool]]:
        """Each request's drafts and whether they came from its predicted output: the prediction's where it
        follows the output, else the drafter's (none without one)."""
        proposals: list[tuple[list[int], bool]] = []
        for item in wanting:
            prediction = item.state.prediction
            drafts = prediction.propose(item.state.output_token_ids, item.num_spec) if prediction is not None else []
            proposals.append((drafts, bool(drafts)))
        undrafted = [index for index, (drafts, _) in enumerate(proposals) if not drafts]
        if self.drafter is not None and undrafted:
            batch = [DraftRequest(wanting[index].state, wanting[index].num_spec) for index in undrafted]
            for index, drafts in zip(undrafted, self.drafter.propose(batch)):
                proposals[index] = (drafts, False)
        return proposals

    def reset(self) -> None:
        """Forget every request (a new Execute stream starts from nothing)."""
        self._unsettled.clear()
        self._multi_step = None
        self.requests.clear()
        self.last_tokens.clear()
        if self.drafter is not None:
            self.drafter.reset()


def drafts_before_forbidden(state: ExecutorRequestState, drafts: list[int]) -> list[int]:
    """The drafts up to the first one allowed_token_ids or a bad word forbids (certain to be rejected, and so every
    draft after it). Bad words read the outputs on the host: steps that propose drafts are never deferred."""
    if state.allowed_tokens is None and not state.params.bad_words:
        return drafts
    history = list(state.output_token_ids)
    for index, draft in enumerate(drafts):
        forbidden = draft < 0 or (state.allowed_tokens is not None and not token_allowed(state.allowed_tokens, draft))
        if forbidden or draft in banned_tokens(state.params.bad_words, history):
            return drafts[:index]
        history.append(draft)
    return drafts
