"""Measures what dynamic speculative decoding plans with, through the runner's own step path:
the step time ITL(B, K) for decode batches of B requests verifying K drafts each, and the drafter's
per-position acceptance on calibration prompts (greedy).

Requests are dummies the executor owns for the measurement (ids start with ``__profile``), given
contiguous blocks of the KV cache; the runner is reset afterwards.

The step times of a shared machine drift in regimes that last several steps (measured on the 2-core box:
B = 1, K = 0 steps at 45-56 ms for four steps, then 72-77 ms for eight), so measuring K = 0 first and
K = 5 last put each column in a different regime (ITL(1, 1) / ITL(1, 0) read 1.0 to 1.30 between
profiles of the same executor). Each cycle therefore runs every K once, in alternating order, and a
column's time is ITL(B, 0) times the median over cycles of its ratio to that cycle's K = 0 step.

The timed requests read the calibration prompts' text (``timing_contexts``), and the drafter drafts as it is timed
(``Drafter.timed_as``: eagle_ngram with its head alone): what a draft costs must not depend on how often the
profile's own short generations happen to repeat themselves.

Cost (SmolLM2-135M, K 0..5, batch sizes 1..64, one thread): the prefills of the dummies and the timed steps of
the largest batches dominate, so only the first batch size warms every K up (later ones run one untimed step
of the largest K, which meets the new batch's buffers first), and cycles stop at two once a batch size has used
its budget: two cycles in opposite orders already cancel a drift that spans them.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from executor_svc.model_runner import ModelRunner
from stepahead_proto import executor_pb2, sampling_pb2

PROFILE_PREFIX = "__profile"
MAX_CYCLES = 8
"""Timing cycles per batch size unless a Profile request asks for another number (its ``repeats``)."""
MIN_CYCLES = 2
"""Timing cycles every batch size gets (unless ``repeats`` asks for fewer)."""
BATCH_BUDGET_S = 5.0
"""Past MIN_CYCLES, no new cycle starts once a batch size's timed cycles took this long: large batches,
whose longer steps average short spells out anyway, stop early and keep the profile within its budget."""
GREEDY = sampling_pb2.SamplingParams(temperature=0.0)


@dataclass
class _Dummy:
    request_id: str
    prompt: list[int]
    block_ids: list[int]
    computed: int = 0


class StepProfiler:
    """Runs dummy batches through ``runner`` (reset before and after each measurement)."""

    def __init__(self, runner: ModelRunner, num_blocks: int) -> None:
        self.runner = runner
        self.num_blocks = num_blocks
        self._step_id = 0

    def max_batch_size(self, tokens_per_request: int) -> int:
        """The largest batch whose requests each fit ``tokens_per_request`` tokens in the cache."""
        return self.num_blocks // -(-tokens_per_request // self.runner.block_size)

    def step_times_ms(
        self, batch_sizes: list[int], max_k: int, context_len: int = 64, repeats: int = MAX_CYCLES,
        texts: list[list[int]] | None = None,
    ) -> list[list[float]]:
        """Step time [len(batch_sizes)][K + 1] in ms for K = 0..max_k.

        Each batch size is prefilled once, then timed over at most ``repeats`` cycles that each run every K
        once, after a warm-up: a cycle for the first batch size, one step of the largest K for the others;
        see ``column_times``, MIN_CYCLES and BATCH_BUDGET_S. ``texts``: token ids the timed requests'
        contexts are taken from (``timing_contexts``); None: a synthetic context."""
        return [self._time_batch(timing_contexts(texts, batch_size, context_len), max_k, repeats,
                                 warm_every_k=index == 0)
                for index, batch_size in enumerate(batch_sizes)]

    def fits(self, batch_size: int, max_k: int, context_len: int = 64, repeats: int = MAX_CYCLES) -> bool:
        """Whether a timing batch of ``batch_size`` requests fits the KV cache."""
        return batch_size <= self.max_batch_size(self._timing_tokens(max_k, context_len, repeats))

    @staticmethod
    def acceptance_tokens(prompt_len: int, max_k: int, max_tokens: int) -> int:
        """KV slots one calibration request may fill: every decode step may accept all its drafts."""
        return prompt_len + max_tokens * (max_k + 1) + max_k + 1

    @staticmethod
    def _timing_tokens(max_k: int, context_len: int, repeats: int) -> int:
        return context_len + sum((repeats + 1) * (k + 1) for k in range(max_k + 1)) + max_k

    def acceptance(self, prompts: list[list[int]], max_k: int, max_tokens: int = 48) -> list[float]:
        """Conditional acceptance of draft positions 1..max_k over greedy generations of the prompts."""
        tokens_per_request = self.acceptance_tokens(max(len(p) for p in prompts), max_k, max_tokens)
        dummies = self._dummies([list(p) for p in prompts], tokens_per_request)
        tried, accepted = [0] * max_k, [0] * max_k
        self.runner.reset()
        try:
            self._prefill(dummies, max_k)
            for _ in range(max_tokens):
                result = self.runner.execute(self._decode_step(dummies, max_k, max_k))
                for output in result.outputs:
                    # Padded slots (no draft found) count as rejected: that is what a verify yields.
                    for position in range(min(output.num_draft_slots, output.num_accepted + 1)):
                        tried[position] += 1
                        accepted[position] += position < output.num_accepted
        finally:
            self.runner.reset()
        return [a / t if t else 0.0 for a, t in zip(accepted, tried)]

    def _time_batch(self, contexts: list[list[int]], max_k: int, repeats: int, warm_every_k: bool) -> list[float]:
        tokens_per_request = self._timing_tokens(max_k, max(len(context) for context in contexts), repeats)
        dummies = self._dummies(contexts, tokens_per_request)
        self.runner.reset()
        cycles: list[list[float]] = []
        timed_ms = 0.0
        try:
            with drafting_as_timed(self.runner):
                self._prefill(dummies, max_k)
                if warm_every_k:
                    self._time_cycle(dummies, 0, max_k)  # not kept
                else:
                    self.runner.execute(self._decode_step(dummies, max_k, max_k))
                while len(cycles) < repeats and (len(cycles) < MIN_CYCLES or timed_ms < 1000 * BATCH_BUDGET_S):
                    cycles.append(self._time_cycle(dummies, len(cycles) + 1, max_k))
                    timed_ms += sum(cycles[-1])
        finally:
            self.runner.reset()
        return column_times(cycles)

    def _time_cycle(self, dummies: list[_Dummy], cycle: int, max_k: int) -> list[float]:
        """One decode step per K (in ``cycle_order``); their times in ms, indexed by K."""
        times = [0.0] * (max_k + 1)
        for k in cycle_order(cycle, max_k):
            step = self._decode_step(dummies, k, k)
            start = time.perf_counter()
            self.runner.execute(step)
            times[k] = 1000 * (time.perf_counter() - start)
        return times

    def _dummies(self, prompts: list[list[int]], tokens_per_request: int) -> list[_Dummy]:
        blocks = -(-tokens_per_request // self.runner.block_size)
        if blocks * len(prompts) > self.num_blocks:
            raise ValueError(f"batch_sizes: {len(prompts)} requests of {tokens_per_request} tokens do not fit "
                             f"the KV cache ({self.num_blocks} blocks)")
        return [_Dummy(f"{PROFILE_PREFIX}-{i}", prompt, list(range(i * blocks, (i + 1) * blocks)))
                for i, prompt in enumerate(prompts)]

    def _prefill(self, dummies: list[_Dummy], k: int) -> None:
        step = executor_pb2.StepRequest(step_id=self._next_id(), num_steps=1)
        for dummy in dummies:
            step.new_requests.add(request_id=dummy.request_id, prompt_token_ids=dummy.prompt, sampling=GREEDY,
                                  block_ids=dummy.block_ids, num_scheduled_tokens=len(dummy.prompt),
                                  num_spec_tokens=k)
            dummy.computed = len(dummy.prompt)
        self.runner.execute(step)

    def _decode_step(self, dummies: list[_Dummy], num_drafts: int, num_spec: int) -> executor_pb2.StepRequest:
        step = executor_pb2.StepRequest(step_id=self._next_id(), num_steps=1)
        for dummy in dummies:
            state = self.runner.requests[dummy.request_id]
            # With drafts the executor's own count is the truth; the scheduler's view is only checked without.
            step.cached_requests.add(request_id=dummy.request_id, num_computed_tokens=state.num_computed_tokens,
                                     num_scheduled_tokens=1, num_draft_tokens=num_drafts, num_spec_tokens=num_spec)
        return step

    def _next_id(self) -> int:
        self._step_id += 1
        return self._step_id


@contextmanager
def drafting_as_timed(runner: ModelRunner) -> Iterator[None]:
    """While timing, the runner drafts with what its drafter is timed as (``Drafter.timed_as``: eagle_ngram's
    head alone, the others themselves)."""
    drafter = runner.drafter
    if drafter is None:
        yield
        return
    runner.drafter = drafter.timed_as()
    try:
        yield
    finally:
        runner.drafter = drafter


def timing_contexts(texts: list[list[int]] | None, batch_size: int, context_len: int) -> list[list[int]]:
    """The prompts of a timing batch: the last ``context_len`` tokens of each text in turn (a chat prompt
    ends where the answer starts), or, without texts, one synthetic context for all. Timed requests then
    read and write text like the workload's; what the drafter costs on it is ``drafting_as_timed``'s
    business."""
    usable = [text[-context_len:] for text in texts or [] if text]
    if not usable:
        return [[(7 * i) % 97 + 3 for i in range(context_len)] for _ in range(batch_size)]
    return [list(usable[index % len(usable)]) for index in range(batch_size)]


def cycle_order(cycle: int, max_k: int) -> list[int]:
    """The order K = 0..max_k run in within one timing cycle: ascending, then descending, alternately
    (so no K is always the one right after the prefill or right after the largest step)."""
    ascending = list(range(max_k + 1))
    return ascending if cycle % 2 == 0 else ascending[::-1]


def column_times(cycles: list[list[float]]) -> list[float]:
    """ITL for K = 0..max_k from timing cycles (``cycles[c][k]``: the step of cycle c with K drafts, ms).

    K = 0 takes its median over cycles; K > 0 takes that times the median of its ratio to the K = 0 step
    of the same cycle: a slow spell that covers a whole cycle then cancels out instead of landing in
    whichever column was being timed."""
    if not cycles:
        raise ValueError("repeats: at least one timing cycle is needed")
    base = statistics.median(cycle[0] for cycle in cycles)
    return [base * statistics.median(cycle[k] / cycle[0] for cycle in cycles) for k in range(len(cycles[0]))]
