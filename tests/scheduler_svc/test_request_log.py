"""The request log's line: finish reason (with the stop string or token), token counts, timings, and preemptions
and accepted drafts only when there were any; never the prompt's or the output's text."""

from __future__ import annotations

from scheduler_svc.request_log import finished_line
from stepahead_proto import generation_pb2


def test_a_line_names_everything_but_the_text():
    message = generation_pb2.GenerateResponse(request_id="r1", text="secret", finish_reason=1, stop_reason="###")
    message.usage.prompt_tokens, message.usage.completion_tokens = 12, 30
    message.usage.cached_prompt_tokens, message.usage.num_preemptions = 8, 2
    message.timings.queue_s, message.timings.ttft_s, message.timings.itl_mean_s, message.timings.e2e_s = (
        0.01, 0.25, 0.0456, 1.5)
    message.spec.drafted, message.spec.accepted = 40, 29
    assert finished_line(message, " on 127.0.0.1:9") == (
        "request r1 on 127.0.0.1:9 finished (stop '###'): prompt 12 tokens (8 cached), output 30 tokens, "
        "queue 0.010 s, ttft 0.250 s, itl 45.6 ms, e2e 1.500 s, 2 preemptions, drafts accepted 29/40")


def test_without_preemptions_or_drafts_the_line_says_nothing_of_them():
    message = generation_pb2.GenerateResponse(request_id="r2", finish_reason=2)
    line = finished_line(message)
    assert line.startswith("request r2 finished (length): prompt 0 tokens (0 cached), output 0 tokens, ")
    assert "preemptions" not in line and "drafts" not in line
