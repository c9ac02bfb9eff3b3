"""Dynamic speculative decoding: the number of drafts K for a step, from the executor's measured step
time and the drafts' measured acceptance.

A step of B decoding requests that verifies K drafts each costs ITL(B, K) (profiled on the executor)
and yields AL(K) = 1 + a1 + a1*a2 + ... + a1*...*aK tokens per request in expectation, where a_i is the
probability that draft i is accepted given that drafts 1..i-1 were. The policy takes the K (0
included) with the most tokens per second, AL(K) / ITL(B, K), where a larger K must beat the best smaller
one by a margin (DEFAULT_MIN_GAIN): the profile's step times carry a few percent of measurement noise, and
a near-tie is not worth drafting for. The a_i start from the profile's prior
(measured on calibration prompts) and follow live counts with an exponentially weighted average, so
K moves when the workload's predictability changes.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

DEFAULT_DECAY = 0.05
"""Weight of each new verify in the acceptance estimate: about 1/0.05 = 20 verifies of memory."""
DEFAULT_MIN_GAIN = 0.03
"""A larger K is taken only when its AL(K) / ITL(B, K) beats the best smaller K's by this fraction. The step
profile is measured on a shared machine: where drafting one token more looks free (ITL(B, 1) == ITL(B, 0)
after noise and the monotone repair), a few accepted drafts in a hundred would otherwise turn speculation on
for a real cost of a few percent."""
DEFAULT_PROBE_BUDGET = 0.01
"""While K = 0 is best, one step now and then drafts K = 1 anyway (without drafts nothing is observed, and a
workload that became predictable again would never be noticed); probes are spaced so that their extra
time, ITL(B, 1) - ITL(B, 0) each, stays within this fraction of the time spent at K = 0."""


class KPolicy(Protocol):
    """What the scheduler asks for K each step and tells about each verify."""

    def choose(self, batch_size: int) -> int: ...

    def observe(self, num_drafted: int, num_accepted: int) -> None: ...


class FixedK:
    """The same K every step (``--num-spec-tokens N``)."""

    def __init__(self, num_spec_tokens: int) -> None:
        if num_spec_tokens < 0:
            raise ValueError(f"num_spec_tokens: must be >= 0, got {num_spec_tokens}")
        self.num_spec_tokens = num_spec_tokens

    def choose(self, batch_size: int) -> int:
        """K for any step."""
        return self.num_spec_tokens

    def observe(self, num_drafted: int, num_accepted: int) -> None:
        """Nothing to learn."""


@dataclass(frozen=True)
class StepTimeProfile:
    """Step time ITL(B, K) in ms, measured for decode batch sizes B and draft counts K = 0..K_max."""

    batch_sizes: tuple[int, ...]
    """Ascending, distinct, >= 1."""
    step_ms: tuple[tuple[float, ...], ...]
    """step_ms[i][k]: the step time at batch_sizes[i] with k drafts per request (k = 0..K_max)."""
    acceptance_prior: tuple[float, ...]
    """Conditional acceptance of draft positions 1..K_max on calibration prompts."""

    def __post_init__(self) -> None:
        if not self.batch_sizes or self.batch_sizes[0] < 1 or list(self.batch_sizes) != sorted(set(self.batch_sizes)):
            raise ValueError(f"batch_sizes: must be ascending, distinct and >= 1, got {list(self.batch_sizes)}")
        if len(self.step_ms) != len(self.batch_sizes):
            raise ValueError(
                f"step_ms: needs one row per batch size ({len(self.batch_sizes)}), got {len(self.step_ms)}"
            )
        widths = {len(row) for row in self.step_ms}
        if len(widths) != 1 or min(widths) < 1:
            raise ValueError("step_ms: every row needs the same number (>= 1) of K columns")
        if any(not value > 0 for row in self.step_ms for value in row):
            raise ValueError("step_ms: every step time must be > 0")
        if len(self.acceptance_prior) != self.max_num_spec_tokens:
            raise ValueError(f"acceptance_prior: needs {self.max_num_spec_tokens} positions, "
                             f"got {len(self.acceptance_prior)}")
        if any(not 0.0 <= rate <= 1.0 for rate in self.acceptance_prior):
            raise ValueError("acceptance_prior: rates must be in [0, 1]")

    @property
    def max_num_spec_tokens(self) -> int:
        """K_max: the largest K profiled."""
        return len(self.step_ms[0]) - 1

    def step_time(self, batch_size: int, num_spec_tokens: int) -> float:
        """ITL(B, K) in ms: linear between the profiled batch sizes around B, the nearest one outside them."""
        if not 0 <= num_spec_tokens <= self.max_num_spec_tokens:
            raise ValueError(f"num_spec_tokens: must be in [0, {self.max_num_spec_tokens}], got {num_spec_tokens}")
        sizes = self.batch_sizes
        if batch_size <= sizes[0]:
            return self.step_ms[0][num_spec_tokens]
        if batch_size >= sizes[-1]:
            return self.step_ms[-1][num_spec_tokens]
        upper = bisect.bisect_left(sizes, batch_size)
        lower = upper - 1
        weight = (batch_size - sizes[lower]) / (sizes[upper] - sizes[lower])
        low, high = self.step_ms[lower][num_spec_tokens], self.step_ms[upper][num_spec_tokens]
        return low + weight * (high - low)

    def to_dict(self) -> dict[str, Any]:
        return {"batch_sizes": list(self.batch_sizes), "step_ms": [list(row) for row in self.step_ms],
                "acceptance_prior": list(self.acceptance_prior)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> StepTimeProfile:
        return cls(tuple(data["batch_sizes"]), tuple(tuple(row) for row in data["step_ms"]),
                   tuple(data["acceptance_prior"]))


class AcceptanceEstimate:
    """Conditional acceptance a_i per draft position, from a prior and exponentially weighted live counts."""

    def __init__(self, prior: Sequence[float], decay: float = DEFAULT_DECAY) -> None:
        if not 0.0 < decay <= 1.0:
            raise ValueError(f"decay: must be in (0, 1], got {decay}")
        self.rates = [float(rate) for rate in prior]
        self.decay = decay

    def observe(self, num_drafted: int, num_accepted: int) -> None:
        """One request's verify: drafts 1..num_accepted were accepted, draft num_accepted + 1 (if drafted)
        was rejected; positions past the first rejection were never tried."""
        if not 0 <= num_accepted <= num_drafted:
            raise ValueError(f"num_accepted: must be in [0, {num_drafted}], got {num_accepted}")
        for position in range(min(num_drafted, num_accepted + 1, len(self.rates))):
            accepted = 1.0 if position < num_accepted else 0.0
            self.rates[position] += self.decay * (accepted - self.rates[position])

    def expected_tokens(self, num_spec_tokens: int) -> float:
        """AL(K): tokens a verify of K drafts yields in expectation (the target's own token included)."""
        total, reach = 1.0, 1.0
        for rate in self.rates[:num_spec_tokens]:
            reach *= rate
            total += reach
        return total


class DynamicKPolicy:
    """Chooses K per step: argmax over K in 0..K_max of AL(K) / ITL(B, K); the smaller K on a near-tie
    (within ``min_gain``)."""

    def __init__(
        self,
        profile: StepTimeProfile,
        decay: float = DEFAULT_DECAY,
        probe_budget: float = DEFAULT_PROBE_BUDGET,
        min_gain: float = DEFAULT_MIN_GAIN,
    ) -> None:
        if not 0.0 <= probe_budget < 1.0:
            raise ValueError(f"probe_budget: must be in [0, 1), got {probe_budget}")
        if not 0.0 <= min_gain < 1.0:
            raise ValueError(f"min_gain: must be in [0, 1), got {min_gain}")
        self.profile = profile
        self.min_gain = min_gain
        self.acceptance = AcceptanceEstimate(profile.acceptance_prior, decay)
        self.probe_budget = probe_budget
        self._probe_credit_ms = 0.0

    def choose(self, batch_size: int) -> int:
        """K for a step with ``batch_size`` decoding requests (0: do not speculate; 1 now and then to probe)."""
        best = self.best_k(batch_size)
        if best or not self.profile.max_num_spec_tokens or not self.probe_budget:
            self._probe_credit_ms = 0.0
            return best
        batch = max(1, batch_size)
        base_ms = self.profile.step_time(batch, 0)
        self._probe_credit_ms += self.probe_budget * base_ms
        # A probe looks free where the profile has ITL(B, 1) == ITL(B, 0); it is not: count it at min_gain.
        probe_cost_ms = max(self.profile.step_time(batch, 1) - base_ms, self.min_gain * base_ms)
        if self._probe_credit_ms >= probe_cost_ms:
            self._probe_credit_ms = 0.0
            return 1
        return 0

    def best_k(self, batch_size: int) -> int:
        """The argmax of AL(K) / ITL(B, K) over K = 0..K_max, a larger K only if better by min_gain (no probing)."""
        if batch_size < 1:
            return 0
        best_k, best_rate = 0, 0.0
        for k in range(self.profile.max_num_spec_tokens + 1):
            rate = self.acceptance.expected_tokens(k) / self.profile.step_time(batch_size, k)
            if rate > best_rate * (1 + self.min_gain + 1e-9):
                best_k, best_rate = k, rate
        return best_k

    def observe(self, num_drafted: int, num_accepted: int) -> None:
        """Feed one request's verify outcome (from its step output)."""
        self.acceptance.observe(num_drafted, num_accepted)
