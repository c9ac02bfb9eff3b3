"""The K the scheduler chose reaches the client (SpecStats, hence `stepahead generate --json`) and the
benchmark's run summary."""

from __future__ import annotations

import json

from client.bench.load import LoadResult, RequestRecord
from client.bench.stats import speculation_summary
from client.types import SpecStats
from scheduler_svc.spec_stats import SpecStatsTracker
from stepahead_proto import generation_pb2


def test_per_request_k_counts_travel_in_the_final_message():
    tracker = SpecStatsTracker()
    for k in (3, 3, 0, 1):
        tracker.record_k(k)
    tracker.record(3, 3, 2)
    message = tracker.to_proto()
    assert list(message.steps_per_k) == [1, 1, 0, 2] and message.mean_k == 7 / 4
    stats = SpecStats.from_proto(message)
    assert stats.steps_per_k == (1, 1, 0, 2) and stats.mean_k == 1.75
    printed = json.loads(json.dumps(stats.to_dict()))  # what `generate --json` prints under "spec"
    assert printed["steps_per_k"] == [1, 1, 0, 2] and printed["mean_k"] == 1.75


def test_old_messages_without_k_counts_still_parse():
    stats = SpecStats.from_proto(generation_pb2.SpecStats(drafted=2, accepted=1, verify_steps=1))
    assert stats.steps_per_k == () and stats.mean_k == 0.0


def test_the_bench_summary_reports_the_mean_k_over_decode_steps():
    records = [RequestRecord(sent_at=0.0, spec=SpecStats(4, 2, (2,), 1.5, 2, (2, 0, 2), 1.0)),
               RequestRecord(sent_at=0.0, spec=SpecStats(1, 1, (1,), 2.0, 1, (0, 1), 1.0))]
    summary = speculation_summary(LoadResult(concurrency=2, wall_s=1.0, records=records))
    assert summary["steps_per_k"] == [2, 1, 2] and summary["mean_k"] == 1.0


def test_per_position_acceptance_divides_by_the_steps_that_tried_the_position():
    # K changes between steps: position 2 was tried twice (both K=3 steps accepted position 1) and
    # accepted once, though four steps accepted position 1. Dividing by those four would say 0.25.
    tracker = SpecStatsTracker()
    tracker.record(3, 3, 2)  # positions 1, 2 accepted, 3 rejected
    tracker.record(3, 3, 1)  # position 1 accepted, 2 rejected
    tracker.record(1, 1, 1)
    tracker.record(1, 1, 1)
    tracker.record(1, 1, 0)
    message = tracker.to_proto()
    assert list(message.accepted_per_position) == [4, 1, 0]
    assert list(message.tried_per_position) == [5, 2, 1]
    record = RequestRecord(sent_at=0.0, spec=SpecStats.from_proto(message))
    summary = speculation_summary(LoadResult(concurrency=1, wall_s=1.0, records=[record]))
    assert summary["acceptance_per_position"] == [0.8, 0.5, 0.0]
