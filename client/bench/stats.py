"""Summaries of a load run: throughput and latency percentiles."""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from client.bench.load import LoadResult


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100) by linear interpolation; nan for no values."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    position = (len(ordered) - 1) * q / 100
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def summarize(result: LoadResult) -> dict:
    """Throughput (output tok/s), TTFT and ITL percentiles in milliseconds."""
    tokens = sum(r.num_tokens for r in result.records)
    ttfts = [r.ttft_s for r in result.records if r.token_times]
    itls = [gap for r in result.records for gap in r.itl_samples]
    tpots = [tpot for r in result.records if (tpot := r.tpot_s) is not None]
    return {
        "concurrency": result.concurrency,
        "num_requests": len(result.records),
        "output_tokens": tokens,
        "wall_s": result.wall_s,
        "throughput_tok_s": tokens / result.wall_s,
        "ttft_ms_p50": 1000 * percentile(ttfts, 50),
        "ttft_ms_p99": 1000 * percentile(ttfts, 99),
        "itl_ms_p50": 1000 * percentile(itls, 50),
        "itl_ms_p99": 1000 * percentile(itls, 99),
        "itl_ms_mean": 1000 * statistics.fmean(itls) if itls else float("nan"),
        # ITL samples are per token: with several tokens per message (--stream-interval, speculation) most are 0.
        "tpot_ms_mean": 1000 * statistics.fmean(tpots) if tpots else float("nan"),
        "decode_contexts": decode_context_quantiles(result, result.concurrency),
        **speculation_summary(result),
    }


def decode_context_quantiles(result: LoadResult, batch_size: int) -> list[int]:
    """``batch_size`` evenly spaced quantiles of the context lengths the run decoded at: the batch a
    bare forward is timed on to compare with this run's ITL (spread included, as the attention pads
    a batch to its longest context)."""
    contexts = [n for record in result.records for n in record.decode_contexts]
    if not contexts:
        return [1] * batch_size
    return [max(1, round(percentile(contexts, 100 * (i + 0.5) / batch_size))) for i in range(batch_size)]


def speculation_summary(result: LoadResult) -> dict:
    """Drafts verified and accepted over the run: acceptance rate a and mean acceptance length AL."""
    specs = [r.spec for r in result.records if r.spec is not None]
    if not specs:
        return {}
    drafted = sum(s.drafted for s in specs)
    accepted = sum(s.accepted for s in specs)
    verify_steps = sum(s.verify_steps for s in specs)
    steps_per_k = [sum(s.steps_per_k[k] for s in specs if k < len(s.steps_per_k))
                   for k in range(max((len(s.steps_per_k) for s in specs), default=0))]
    decode_steps = sum(steps_per_k)
    width = max((len(s.accepted_per_position) for s in specs), default=0)
    accepted_at = [sum(s.accepted_per_position[i] for s in specs if i < len(s.accepted_per_position))
                   for i in range(width)]
    tried_at = [sum(s.tried_per_position[i] for s in specs if i < len(s.tried_per_position)) for i in range(width)]
    return {
        # Conditional acceptance of draft position i: accepted / tried with positions 0..i-1 accepted.
        "acceptance_per_position": [count / tried if tried else 0.0 for count, tried in zip(accepted_at, tried_at)],
        "steps_per_k": steps_per_k,
        "mean_k": sum(k * n for k, n in enumerate(steps_per_k)) / decode_steps if decode_steps else 0.0,
        "spec_drafted": drafted,
        "spec_accepted": accepted,
        "spec_verify_steps": verify_steps,
        "acceptance_rate": accepted / drafted if drafted else 0.0,
        "mean_acceptance_length": 1 + accepted / verify_steps if verify_steps else 1.0,
    }
