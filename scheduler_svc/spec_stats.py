"""Per-request statistics of speculative decoding, as reported in the final message."""

from __future__ import annotations

from dataclasses import dataclass, field

from stepahead_proto import generation_pb2


@dataclass
class SpecStatsTracker:
    """Counts drafts verified and accepted for one request, per draft position."""

    drafted: int = 0
    accepted: int = 0
    verify_steps: int = 0
    accepted_per_position: list[int] = field(default_factory=list)
    tried_per_position: list[int] = field(default_factory=list)
    """tried_per_position[i]: verify steps with a slot at position i and positions 0..i-1 accepted."""
    steps_per_k: list[int] = field(default_factory=list)
    """steps_per_k[k]: decode steps that verified k draft slots."""
    prediction_accepted: int = 0
    """Drafts taken from the request's predicted output that were accepted."""
    prediction_rejected: int = 0
    """Drafts taken from the request's predicted output that were rejected."""

    def record(self, num_slots: int, num_drafted: int, num_accepted: int) -> None:
        """One verify step with ``num_slots`` draft slots, of which ``num_drafted`` held real drafts."""
        self.verify_steps += 1
        self.drafted += num_drafted
        self.accepted += num_accepted
        if len(self.accepted_per_position) < num_slots:
            self.accepted_per_position.extend([0] * (num_slots - len(self.accepted_per_position)))
            self.tried_per_position.extend([0] * (num_slots - len(self.tried_per_position)))
        for position in range(num_accepted):
            self.accepted_per_position[position] += 1
        for position in range(min(num_slots, num_accepted + 1)):
            self.tried_per_position[position] += 1

    def record_prediction(self, num_drafted: int, num_accepted: int) -> None:
        """One verify step's drafts came from the predicted output (recorded by ``record`` as well)."""
        self.prediction_accepted += num_accepted
        self.prediction_rejected += num_drafted - num_accepted

    def record_k(self, num_slots: int) -> None:
        """One decode step of the request verified ``num_slots`` draft slots (the K chosen for it)."""
        if len(self.steps_per_k) <= num_slots:
            self.steps_per_k.extend([0] * (num_slots + 1 - len(self.steps_per_k)))
        self.steps_per_k[num_slots] += 1

    @property
    def mean_k(self) -> float:
        """Mean K over the recorded decode steps (0 when none)."""
        steps = sum(self.steps_per_k)
        return sum(k * n for k, n in enumerate(self.steps_per_k)) / steps if steps else 0.0

    def to_proto(self) -> generation_pb2.SpecStats:
        mean_length = 1 + self.accepted / self.verify_steps if self.verify_steps else 0.0
        return generation_pb2.SpecStats(
            drafted=self.drafted,
            accepted=self.accepted,
            accepted_per_position=self.accepted_per_position,
            mean_acceptance_length=mean_length,
            verify_steps=self.verify_steps,
            steps_per_k=self.steps_per_k,
            mean_k=self.mean_k,
            tried_per_position=self.tried_per_position,
        )
