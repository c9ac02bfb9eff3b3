"""EAGLE-style drafts where the context has no n-gram match, prompt-lookup drafts where it has one.

Measured on greedy MT-Bench continuations of the default model (bench/README.md, 2026-11-26 night): 35% of
positions have a match of the last 2-4 tokens earlier in the prompt + output, and there the lookup's drafts
are accepted 4x as often as the head's (1.89 vs 0.42 of 3); elsewhere the head drafts. The head still reads
every step's target features, so it catches up over the lookup-drafted tokens the next time it drafts.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from executor_svc.drafters.base import Drafter, DraftRequest
from executor_svc.drafters.eagle import EagleDrafter
from executor_svc.drafters.ngram import NgramDrafter
from executor_svc.host_batch import HostBatch


class EagleNgramDrafter:
    """Per request and step: the n-gram lookup's drafts when it finds a match, else the EAGLE-style head's."""

    name = "eagle_ngram"
    reads_target_hidden = True

    def __init__(self, eagle: EagleDrafter, ngram: NgramDrafter) -> None:
        self.eagle = eagle
        self.ngram = ngram

    @property
    def source_dir(self) -> str | None:
        """Where its head was loaded from."""
        return self.eagle.source_dir

    def observe(self, host: HostBatch, request_ids: Sequence[str], hidden: torch.Tensor, slots: torch.Tensor) -> None:
        self.eagle.observe(host, request_ids, hidden, slots)

    def propose(self, batch: list[DraftRequest]) -> list[list[int]]:
        proposals = self.ngram.propose(batch)
        unmatched = [index for index, drafts in enumerate(proposals) if not drafts]
        for index, drafts in zip(unmatched, self.eagle.propose([batch[index] for index in unmatched])):
            proposals[index] = drafts
        return proposals

    def timed_as(self) -> Drafter:
        """The head alone: the step profile prices every draft at the head's cost.

        The lookup drafts for almost nothing where it finds a match, and how often it does depends on the text:
        the profile's short greedy generations soon repeat themselves (9 of 12 K = 3 steps matched), MT-Bench
        answers match at 35% of positions. Timed with the lookup, K = 3 at one request cost 1.12-1.2x K = 1 in
        the profile but 1.27x in the stack, and dynamic K drafted 3 where 1 was faster. At the head's cost a
        draft is dearer than on average (by about the lookup's share of the head's cost), which errs toward the
        smaller K, and only where the lookup's drafts would have been accepted most."""
        return self.eagle

    def adopt_cached_prefix(self, request_id: str, num_cached_tokens: int) -> None:
        self.eagle.adopt_cached_prefix(request_id, num_cached_tokens)

    def drop(self, request_id: str) -> None:
        self.eagle.drop(request_id)
        self.ngram.drop(request_id)

    def reset(self) -> None:
        self.eagle.reset()
        self.ngram.reset()
