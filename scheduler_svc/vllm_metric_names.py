"""The scheduler's series again under vLLM's names (``vllm:...``, labelled ``model_name``), with
--metrics-vllm-names: dashboards and alerts written for vLLM read stepahead unchanged.

Each vLLM series is one of the scheduler's own (RENAMED), read at scrape time: the same values, never counted
twice. ``vllm:kv_cache_usage_perc`` (0..1) is kv_blocks_used / kv_blocks_total; ``request_success`` keeps the finish
reason as ``finished_reason``, vLLM's label.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from prometheus_client.metrics_core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

VLLM_PREFIX = "vllm:"


@dataclass(frozen=True)
class Renamed:
    """One vLLM series: the scheduler series it repeats and its labels' vLLM names."""

    vllm_name: str
    source_name: str
    """The scheduler family's name (without ``_total`` for a counter)."""
    labels: tuple[tuple[str, str], ...] = ()
    """(scheduler label, vLLM label) pairs."""


RENAMED = (
    Renamed("num_requests_running", "stepahead_scheduler_requests_running"),
    Renamed("num_requests_waiting", "stepahead_scheduler_requests_waiting"),
    Renamed("num_preemptions", "stepahead_scheduler_preemptions"),
    Renamed("prompt_tokens", "stepahead_scheduler_prompt_tokens"),
    Renamed("generation_tokens", "stepahead_scheduler_generation_tokens"),
    Renamed("request_success", "stepahead_scheduler_requests_finished", (("finish_reason", "finished_reason"),)),
    Renamed("time_to_first_token_seconds", "stepahead_scheduler_time_to_first_token_seconds"),
    Renamed("inter_token_latency_seconds", "stepahead_scheduler_inter_token_latency_seconds"),
    Renamed("e2e_request_latency_seconds", "stepahead_scheduler_e2e_request_latency_seconds"),
    Renamed("request_queue_time_seconds", "stepahead_scheduler_request_queue_time_seconds"),
    Renamed("prefix_cache_queries", "stepahead_scheduler_prefix_cache_queried_tokens"),
    Renamed("prefix_cache_hits", "stepahead_scheduler_prefix_cache_hit_tokens"),
    Renamed("spec_decode_num_draft_tokens", "stepahead_scheduler_spec_draft_tokens"),
    Renamed("spec_decode_num_accepted_tokens", "stepahead_scheduler_spec_accepted_tokens"),
    Renamed("spec_decode_num_accepted_tokens_per_pos", "stepahead_scheduler_spec_accepted_tokens_per_position"),
)


class VllmNamesCollector(Collector):
    """Repeats ``sources``' families (collected at scrape time) under vLLM's names, each sample labelled
    ``model_name``; ``sources``: the scheduler's collectors (never the registry this is registered in)."""

    def __init__(self, sources: Callable[[], Iterable[Metric]], model_name: str) -> None:
        self._sources = sources
        self._model_name = model_name

    def collect(self) -> Iterator[Metric]:
        families = {family.name: family for family in self._sources()}
        for renamed in RENAMED:
            family = families.get(renamed.source_name)
            if family is not None:
                yield self._renamed(family, renamed)
        used, total = (families.get(f"stepahead_scheduler_kv_blocks_{kind}") for kind in ("used", "total"))
        if used is not None and total is not None and total.samples[0].value:
            usage = GaugeMetricFamily(f"{VLLM_PREFIX}kv_cache_usage_perc", "KV cache usage, 0 to 1.",
                                      labels=["model_name"])
            usage.add_metric([self._model_name], used.samples[0].value / total.samples[0].value)
            yield usage

    def describe(self) -> Iterator[Metric]:
        return iter(())  # read at scrape time only

    def _renamed(self, family: Metric, renamed: Renamed) -> Metric:
        target = f"{VLLM_PREFIX}{renamed.vllm_name}"
        copy = Metric(target, family.documentation, family.type, family.unit)
        label_names = dict(renamed.labels)
        for sample in family.samples:
            if sample.name.endswith("_created"):
                continue
            labels = {"model_name": self._model_name,
                      **{label_names.get(key, key): value for key, value in sample.labels.items()}}
            copy.add_sample(target + sample.name.removeprefix(family.name), labels, sample.value, sample.timestamp,
                            sample.exemplar)
        return copy
