"""`stepahead bench --tracing` helpers: alternating modes, the services' environment, the ratio."""

from __future__ import annotations

import pytest

from client.bench.tracing_compare import stack_env, tracing_order, tracing_ratios


def test_modes_alternate_to_cancel_drift():
    assert tracing_order(1) == [False, True]
    assert tracing_order(3) == [False, True, True, False, False, True]
    with pytest.raises(ValueError, match="--tracing-rounds"):
        tracing_order(0)


def test_stack_env_replaces_otel_settings():
    environ = {"PATH": "/bin", "OTEL_TRACES_EXPORTER": "console", "STEPAHEAD_STEP_TRACE_RATE": "0.5"}
    on = stack_env(True, "http://127.0.0.1:4317", environ)
    off = stack_env(False, "http://127.0.0.1:4317", environ)
    kept = {"PATH": "/bin", "STEPAHEAD_STEP_TRACE_RATE": "0.5"}
    assert on == {**kept, "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4317"}
    assert off == {**kept, "OTEL_SDK_DISABLED": "true"}


def test_ratio_of_medians_per_configuration():
    def run(concurrency, on, throughput):
        return {"concurrency": concurrency, "max_inflight_steps": 2, "tracing": on, "throughput_tok_s": throughput}

    runs = [run(1, False, 100.0), run(1, True, 99.0), run(1, True, 95.0), run(1, False, 90.0), run(1, False, 200.0),
            run(4, False, 50.0), {"concurrency": 4, "max_inflight_steps": 2, "throughput_tok_s": 1.0},
            {**run(1, False, 10.0), "spec_method": "ngram"}, {**run(1, True, 5.0), "spec_method": "ngram"}]
    assert tracing_ratios(runs) == {
        "throughput_tracing_on_over_off[c=1 inflight=2]": 97.0 / 100.0,
        "throughput_tracing_on_over_off[c=1 inflight=2 spec=ngram]": 0.5,
    }
