"""Per-request latency bookkeeping: queue time, TTFT and inter-token latencies."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

from stepahead_proto import generation_pb2


@dataclass
class RequestTiming:
    """Timestamps (time.monotonic seconds) of one request's life."""

    arrival: float
    first_scheduled: float | None = None
    deliveries: list[float] = field(default_factory=list)
    """When each batch of output tokens came back from the executor."""

    def mark_scheduled(self, now: float) -> None:
        if self.first_scheduled is None:
            self.first_scheduled = now

    def mark_tokens(self, now: float) -> None:
        self.deliveries.append(now)

    def to_proto(self, finished_at: float, num_output_tokens: int) -> generation_pb2.Timings:
        """Summarise as the final message's Timings."""
        timings = generation_pb2.Timings(e2e_s=finished_at - self.arrival)
        if self.first_scheduled is not None:
            timings.queue_s = self.first_scheduled - self.arrival
        if self.deliveries:
            timings.ttft_s = self.deliveries[0] - self.arrival
        gaps = [b - a for a, b in zip(self.deliveries, self.deliveries[1:])]
        if gaps and num_output_tokens > 1:
            timings.itl_mean_s = (self.deliveries[-1] - self.deliveries[0]) / (num_output_tokens - 1)
            timings.itl_p50_s = statistics.median(gaps)
            timings.itl_max_s = max(gaps)
        return timings
