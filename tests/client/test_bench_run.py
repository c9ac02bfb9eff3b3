"""`stepahead bench` end to end on a tiny checkpoint: every run gets its own bare forward on its contexts."""

from __future__ import annotations

import json

import pytest

from client.cli import main

pytestmark = pytest.mark.stack


def test_bench_reports_sync_and_async_against_bare_forwards(tiny_model_dir, tmp_path, capsys):
    main(["bench", "--model", str(tiny_model_dir), "--no-hf", "--concurrency", "1", "3", "--num-prompts", "3",
          "--max-tokens", "6", "--max-inflight-steps", "1", "2", "--num-threads", "1", "--out", str(tmp_path)])
    report = json.loads(next(tmp_path.glob("bench-*.json")).read_text())
    assert [run["label"] for run in report["runs"]] == [
        "c=1 inflight=1", "c=3 inflight=1", "c=1 inflight=2", "c=3 inflight=2"]
    for run in report["runs"]:
        assert len(run["decode_contexts"]) == run["concurrency"]
        assert run["bare_forward"]["context_lens"] == run["decode_contexts"]
        assert run["bare_forward"]["batch_size"] == run["concurrency"]
        assert 0 < run["executor_forward_ms_mean"] <= run["executor_step_ms_mean"]
        ratio = report["ratios"][f"itl_p50_over_bare_forward_batch{run['concurrency']}[{run['label']}]"]
        assert ratio == pytest.approx(run["itl_ms_p50"] / run["bare_forward"]["median_ms"])
    assert [bare["batch_size"] for bare in report["bare_forward"]] == [1, 3]
    assert "throughput_over_sync[c=3 inflight=2]" in report["ratios"]
    assert next(tmp_path.glob("bench-*.png")).stat().st_size > 0
    assert "bare forward + LM head right after the run" in capsys.readouterr().out
