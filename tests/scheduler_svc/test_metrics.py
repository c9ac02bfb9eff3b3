"""Scheduler metrics: scrape-time engine gauges, step and request observations, speculation, /metrics."""

from __future__ import annotations

import urllib.request
from types import SimpleNamespace

import pytest

from scheduler_svc.block_manager import KVBlockManager
from scheduler_svc.engine_load import EngineLoad
from scheduler_svc.metrics import SchedulerMetrics, finish_reason_label
from scheduler_svc.request import Request, StopParams
from scheduler_svc.request_timing import RequestTiming
from stepahead_proto import generation_pb2, sampling_pb2


def value(metrics: SchedulerMetrics, name: str, **labels: str) -> float | None:
    return metrics.registry.get_sample_value(name, labels)


class FakeEngine:
    """The collector's view of an engine, over a scheduler whose numbers the test changes."""

    def __init__(self, num_running: int, num_waiting: int, used_blocks: int, preemptions: int) -> None:
        blocks = KVBlockManager(num_blocks=10, block_size=4)
        blocks.allocate("r", used_blocks * 4)
        self.scheduler = SimpleNamespace(
            block_manager=blocks, num_running=num_running, num_waiting=num_waiting, num_preemptions=preemptions
        )

    def load(self) -> EngineLoad:
        blocks = self.scheduler.block_manager
        return EngineLoad(blocks.num_total_blocks, blocks.num_free_blocks, self.scheduler.num_running,
                          self.scheduler.num_waiting, self.scheduler.num_preemptions, blocks_wanted=0,
                          num_prefix_queried_tokens=40, num_prefix_hit_tokens=32)

    def group_loads(self) -> list[tuple[str, EngineLoad]]:
        return [("executor-a:1", self.load())]


def fake_engine(num_running: int, num_waiting: int, used_blocks: int, preemptions: int) -> FakeEngine:
    return FakeEngine(num_running, num_waiting, used_blocks, preemptions)


def make_request(num_prompt: int, num_output: int) -> Request:
    request = Request(
        request_id="r1",
        prompt_token_ids=list(range(num_prompt)),
        sampling=sampling_pb2.SamplingParams(),
        stop_params=StopParams(max_tokens=64),
    )
    request.output_token_ids.extend(range(num_output))
    return request


def test_engine_state_is_read_at_scrape_time():
    metrics = SchedulerMetrics()
    assert value(metrics, "stepahead_scheduler_requests_running") is None  # not bound yet
    engine = fake_engine(num_running=3, num_waiting=2, used_blocks=4, preemptions=5)
    metrics.bind_engine(engine)
    assert value(metrics, "stepahead_scheduler_requests_running") == 3
    assert value(metrics, "stepahead_scheduler_requests_waiting") == 2
    assert value(metrics, "stepahead_scheduler_kv_blocks_used") == 4
    assert value(metrics, "stepahead_scheduler_kv_blocks_free") == 6
    assert value(metrics, "stepahead_scheduler_kv_blocks_total") == 10
    assert value(metrics, "stepahead_scheduler_preemptions_total") == 5
    assert value(metrics, "stepahead_scheduler_prefix_cache_queried_tokens_total") == 40
    assert value(metrics, "stepahead_scheduler_prefix_cache_hit_tokens_total") == 32
    assert value(metrics, "stepahead_scheduler_group_kv_blocks_free", group="executor-a:1") == 6
    assert value(metrics, "stepahead_scheduler_group_requests_running", group="executor-a:1") == 3
    engine.scheduler.block_manager.free("r")
    engine.scheduler.num_running = 0
    assert value(metrics, "stepahead_scheduler_kv_blocks_used") == 0
    assert value(metrics, "stepahead_scheduler_requests_running") == 0


def test_steps_time_and_bubble():
    metrics = SchedulerMetrics()
    metrics.observe_step(0.05, None)  # first step after idling: no bubble
    metrics.observe_step(0.04, 0.01, 0.004)
    metrics.observe_step(0.03, 0.0)
    assert value(metrics, "stepahead_scheduler_steps_total") == 3
    assert value(metrics, "stepahead_scheduler_step_time_seconds_count") == 3
    assert value(metrics, "stepahead_scheduler_step_time_seconds_sum") == pytest.approx(0.12)
    assert value(metrics, "stepahead_scheduler_executor_bubble_seconds_total") == pytest.approx(0.01)
    assert value(metrics, "stepahead_scheduler_executor_bubble_awaiting_step_seconds_total") == pytest.approx(0.004)
    assert value(metrics, "stepahead_scheduler_executor_bubble_gap_seconds_count") == 2


def test_finished_request_observes_tokens_latencies_and_reason():
    metrics = SchedulerMetrics()
    timing = RequestTiming(arrival=100.0, first_scheduled=100.5, deliveries=[101.0, 101.25, 101.75])
    metrics.observe_finished(make_request(7, 3), timing, generation_pb2.FINISH_REASON_LENGTH, now=102.0)
    assert value(metrics, "stepahead_scheduler_prompt_tokens_total") == 7
    assert value(metrics, "stepahead_scheduler_generation_tokens_total") == 3
    assert value(metrics, "stepahead_scheduler_time_to_first_token_seconds_sum") == pytest.approx(1.0)
    assert value(metrics, "stepahead_scheduler_request_queue_time_seconds_sum") == pytest.approx(0.5)
    assert value(metrics, "stepahead_scheduler_e2e_request_latency_seconds_sum") == pytest.approx(2.0)
    assert value(metrics, "stepahead_scheduler_inter_token_latency_seconds_count") == 2
    assert value(metrics, "stepahead_scheduler_inter_token_latency_seconds_sum") == pytest.approx(0.75)
    assert value(metrics, "stepahead_scheduler_requests_finished_total", finish_reason="length") == 1
    assert value(metrics, "stepahead_scheduler_requests_finished_total", finish_reason="stop") is None


def test_structured_output_requests_are_counted_by_kind():
    metrics = SchedulerMetrics()
    constrained = make_request(3, 2)
    constrained.sampling.structured_output.regex = "a+"
    for request in (constrained, constrained, make_request(3, 2)):
        metrics.observe_finished(request, RequestTiming(arrival=1.0), generation_pb2.FINISH_REASON_STOP, now=2.0)
    assert value(metrics, "stepahead_scheduler_structured_output_requests_total", kind="regex") == 2
    assert value(metrics, "stepahead_scheduler_structured_output_requests_total", kind="json_schema") is None


def test_requests_run_with_a_lora_adapter_are_counted_by_adapter():
    metrics = SchedulerMetrics()
    adapted = make_request(3, 2)
    adapted.lora_adapter = "sql"
    for request in (adapted, adapted, make_request(3, 2)):
        metrics.observe_finished(request, RequestTiming(arrival=1.0), generation_pb2.FINISH_REASON_STOP, now=2.0)
    assert value(metrics, "stepahead_scheduler_lora_requests_finished_total", adapter="sql") == 2
    assert value(metrics, "stepahead_scheduler_lora_requests_finished_total", adapter="") is None


def test_request_aborted_before_scheduling_has_no_ttft_or_queue_time():
    metrics = SchedulerMetrics()
    metrics.observe_finished(
        make_request(4, 0), RequestTiming(arrival=1.0), generation_pb2.FINISH_REASON_ABORT, now=3.0
    )
    assert value(metrics, "stepahead_scheduler_requests_finished_total", finish_reason="abort") == 1
    assert value(metrics, "stepahead_scheduler_time_to_first_token_seconds_count") == 0
    assert value(metrics, "stepahead_scheduler_request_queue_time_seconds_count") == 0
    assert value(metrics, "stepahead_scheduler_e2e_request_latency_seconds_count") == 1


def test_errors_are_counted_by_code():
    metrics = SchedulerMetrics()
    metrics.count_error("INVALID_ARGUMENT")
    metrics.count_error("UNAVAILABLE")
    metrics.count_error("UNAVAILABLE")
    assert value(metrics, "stepahead_scheduler_requests_failed_total", code="INVALID_ARGUMENT") == 1
    assert value(metrics, "stepahead_scheduler_requests_failed_total", code="UNAVAILABLE") == 2


def test_speculation_counters_per_position_and_chosen_k():
    metrics = SchedulerMetrics()
    metrics.observe_speculation(drafted=6, accepted=4, accepted_per_position=[2, 1, 1], k=3,
                                tried_per_position=[2, 2, 1])
    metrics.observe_speculation(drafted=3, accepted=1, accepted_per_position=[1, 0, 0], k=0,
                                tried_per_position=[1, 1, 0])
    assert value(metrics, "stepahead_scheduler_spec_draft_tokens_total") == 9
    assert value(metrics, "stepahead_scheduler_spec_accepted_tokens_total") == 5
    per_position = [
        value(metrics, "stepahead_scheduler_spec_accepted_tokens_per_position_total", position=str(p)) for p in range(3)
    ]
    assert per_position == [3, 1, 1]
    tried = [
        value(metrics, "stepahead_scheduler_spec_tried_tokens_per_position_total", position=str(p)) for p in range(3)
    ]
    assert tried == [3, 3, 1]
    assert value(metrics, "stepahead_scheduler_spec_num_draft_tokens_count") == 2
    assert value(metrics, "stepahead_scheduler_spec_num_draft_tokens_bucket", le="0.0") == 1


def test_each_instance_has_its_own_registry():
    first, second = SchedulerMetrics(), SchedulerMetrics()
    first.observe_step(0.1, None)
    assert value(first, "stepahead_scheduler_steps_total") == 1
    assert value(second, "stepahead_scheduler_steps_total") == 0


def test_finish_reason_labels():
    assert finish_reason_label(generation_pb2.FINISH_REASON_STOP) == "stop"
    assert finish_reason_label(generation_pb2.FINISH_REASON_ABORT) == "abort"


def test_http_endpoint_serves_the_registry():
    metrics = SchedulerMetrics()
    metrics.bind_engine(fake_engine(num_running=1, num_waiting=0, used_blocks=2, preemptions=0))
    metrics.observe_step(0.02, None)
    port = metrics.serve_http("127.0.0.1", 0)
    assert port > 0
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    assert "stepahead_scheduler_steps_total 1.0" in text
    assert "stepahead_scheduler_kv_blocks_used 2.0" in text
    assert "process_cpu_seconds_total" in text


def test_metrics_port_is_validated():
    from scheduler_svc.config import SchedulerServiceConfig

    assert SchedulerServiceConfig(model_dir="m", executor_addresses=("h:1",), metrics_port=0).metrics_port == 0
    with pytest.raises(ValueError, match="metrics_port"):
        SchedulerServiceConfig(model_dir="m", executor_addresses=("h:1",), metrics_port=70000)
