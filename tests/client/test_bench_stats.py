"""The benchmark's summaries: the contexts a run decoded at, for the bare-forward baseline."""

from __future__ import annotations

from client.bench.load import LoadResult, RequestRecord
from client.bench.stats import decode_context_quantiles, summarize


def record(prompt_tokens: int, num_tokens: int) -> RequestRecord:
    return RequestRecord(sent_at=0.0, token_times=[0.01 * (i + 1) for i in range(num_tokens)],
                         num_tokens=num_tokens, prompt_tokens=prompt_tokens)


def test_decode_contexts_follow_each_itl_sample():
    one = record(prompt_tokens=10, num_tokens=4)
    assert one.decode_contexts == [11, 12, 13]
    assert len(one.decode_contexts) == len(one.itl_samples)


def test_quantiles_span_the_contexts_of_every_request():
    result = LoadResult(concurrency=2, wall_s=1.0, records=[record(10, 101), record(1000, 101)])
    assert decode_context_quantiles(result, 1) == [round((110 + 1001) / 2)]
    low, high = decode_context_quantiles(result, 2)
    assert 10 < low <= 110 and 1000 < high <= 1100


def test_quantiles_of_a_run_without_decode_steps_are_still_a_batch():
    result = LoadResult(concurrency=3, wall_s=1.0, records=[record(5, 1)])
    assert decode_context_quantiles(result, 3) == [1, 1, 1]


def test_summary_carries_one_context_per_concurrent_sequence():
    result = LoadResult(concurrency=2, wall_s=1.0, records=[record(10, 5), record(20, 5)])
    assert len(summarize(result)["decode_contexts"]) == 2


def test_tpot_is_the_per_token_time_when_messages_carry_several_tokens():
    # Two messages of four tokens, one second apart: three of every four ITL samples are 0.
    bursts = RequestRecord(sent_at=0.0, token_times=[1.0] * 4 + [2.0] * 4, num_tokens=8, prompt_tokens=3)
    steady = record(prompt_tokens=3, num_tokens=5)  # a token every 10 ms
    summary = summarize(LoadResult(concurrency=2, wall_s=2.0, records=[bursts, steady, record(3, 1)]))
    assert summary["itl_ms_p50"] == 0.0
    assert bursts.tpot_s == 1.0 / 7 and record(3, 1).tpot_s is None
    assert summary["tpot_ms_mean"] == (1000 / 7 + 10.0) / 2
