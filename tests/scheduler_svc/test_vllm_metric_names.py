"""--metrics-vllm-names: /metrics repeats the main series under vLLM's names, labelled model_name, with the
scheduler's own values read at scrape time (never counted twice), and the exposition parses as Prometheus text."""

from __future__ import annotations

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from test_metrics import fake_engine, make_request, value

from scheduler_svc.metrics import SchedulerMetrics
from scheduler_svc.request_timing import RequestTiming
from scheduler_svc.vllm_metric_names import RENAMED
from stepahead_proto import generation_pb2

MODEL = {"model_name": "tiny"}


def observed(metrics: SchedulerMetrics) -> None:
    metrics.bind_engine(fake_engine(num_running=3, num_waiting=2, used_blocks=4, preemptions=5))
    timing = RequestTiming(arrival=100.0, first_scheduled=100.5, deliveries=[101.0, 101.25, 101.75])
    metrics.observe_finished(make_request(7, 3), timing, generation_pb2.FINISH_REASON_STOP, now=102.0)
    metrics.observe_speculation(drafted=6, accepted=4, accepted_per_position=[2, 2], k=3,
                                tried_per_position=[3, 2])


def test_vllm_series_repeat_the_schedulers_values():
    metrics = SchedulerMetrics()
    metrics.add_vllm_names("tiny")
    observed(metrics)
    pairs = {
        "vllm:num_requests_running": "stepahead_scheduler_requests_running",
        "vllm:num_requests_waiting": "stepahead_scheduler_requests_waiting",
        "vllm:num_preemptions_total": "stepahead_scheduler_preemptions_total",
        "vllm:prompt_tokens_total": "stepahead_scheduler_prompt_tokens_total",
        "vllm:generation_tokens_total": "stepahead_scheduler_generation_tokens_total",
        "vllm:time_to_first_token_seconds_sum": "stepahead_scheduler_time_to_first_token_seconds_sum",
        "vllm:inter_token_latency_seconds_count": "stepahead_scheduler_inter_token_latency_seconds_count",
        "vllm:e2e_request_latency_seconds_sum": "stepahead_scheduler_e2e_request_latency_seconds_sum",
        "vllm:request_queue_time_seconds_sum": "stepahead_scheduler_request_queue_time_seconds_sum",
        "vllm:prefix_cache_queries_total": "stepahead_scheduler_prefix_cache_queried_tokens_total",
        "vllm:prefix_cache_hits_total": "stepahead_scheduler_prefix_cache_hit_tokens_total",
        "vllm:spec_decode_num_draft_tokens_total": "stepahead_scheduler_spec_draft_tokens_total",
        "vllm:spec_decode_num_accepted_tokens_total": "stepahead_scheduler_spec_accepted_tokens_total",
    }
    for vllm_name, own in pairs.items():
        assert value(metrics, vllm_name, **MODEL) == value(metrics, own) is not None, vllm_name
    assert value(metrics, "vllm:request_success_total", finished_reason="stop", **MODEL) == 1
    assert value(metrics, "vllm:time_to_first_token_seconds_bucket", le="1.0", **MODEL) == 1
    assert value(metrics, "vllm:spec_decode_num_accepted_tokens_per_pos_total", position="1", **MODEL) == 2
    assert value(metrics, "vllm:kv_cache_usage_perc", **MODEL) == pytest.approx(0.4)
    assert value(metrics, "stepahead_scheduler_prompt_tokens_total") == 7  # counted once, read twice


def test_the_exposition_parses_and_names_every_renamed_series():
    metrics = SchedulerMetrics()
    metrics.add_vllm_names("tiny")
    observed(metrics)
    families = {family.name for family in text_string_to_metric_families(generate_latest(metrics.registry).decode())}
    assert {f"vllm:{renamed.vllm_name}" for renamed in RENAMED} | {"vllm:kv_cache_usage_perc"} <= families


def test_without_the_flag_there_are_no_vllm_series():
    metrics = SchedulerMetrics()
    observed(metrics)
    assert "vllm:" not in generate_latest(metrics.registry).decode()
