"""A/B of --stream-interval where the scheduler is the limit: the tiny test checkpoint (2 layers, vocab 400: a
64-row step costs ~1 ms here) at c=64, greedy, fixed 128 tokens, 160 MT-Bench first turns cut to 200 bytes, one
step ahead. Alternating rounds on fresh stacks; per round tok/s, the scheduler's CPU per token, tokens per
message; then medians per interval.

    PYTHONPATH=.:tests/executor_svc:tests/scheduler_svc python3 bench/experiments/ab_stream_interval.py ROUNDS 1 4
"""
import statistics
import sys
import tempfile
from pathlib import Path

from tiny_models import make_tiny_llama
from tiny_tokenizers import build_byte_level

from client import Client
from client.bench.load import run_load
from client.bench.stats import summarize
from client.mtbench import load_mtbench_first_turns
from client.stack import LocalStack

rounds, intervals = int(sys.argv[1]), [int(v) for v in sys.argv[2:]]
model = Path(tempfile.mkdtemp()) / "tiny"
model.mkdir()
build_byte_level(model)
make_tiny_llama(model, seed=0, vocab_size=400)
prompts = [p[:200] for p in load_mtbench_first_turns()] * 2
results: dict[int, list[tuple[float, float, float]]] = {n: [] for n in intervals}
for r in range(rounds):
    for n in (intervals if r % 2 == 0 else intervals[::-1]):
        with LocalStack(str(model), ["--num-threads", "1", "--kv-cache-memory-gb", "0.05"],
                        ["--max-inflight-steps", "2", "--stream-interval", str(n)]) as stack:
            with Client(stack.address) as client:
                before = client.model_info().stats
                result = run_load(stack.address, prompts, 64, 128, ignore_eos=True)
                after = client.model_info().stats
        summary = summarize(result)
        tokens = sum(record.num_tokens for record in result.records)
        messages = sum(len(set(record.token_times)) for record in result.records)  # one arrival time per message
        cpu_ms = 1000 * (after.scheduler_cpu_s - before.scheduler_cpu_s) / tokens
        results[n].append((summary["throughput_tok_s"], cpu_ms, summary["ttft_ms_p50"]))
        print(f"round {r} --stream-interval {n}: {summary['throughput_tok_s']:.0f} tok/s, scheduler CPU {cpu_ms:.3f} "
              f"ms/token, {tokens / messages:.2f} tokens per message, TTFT p50 {summary['ttft_ms_p50']:.0f} ms",
              flush=True)
for n, rows in results.items():
    print(f"--stream-interval {n}: median {statistics.median(x[0] for x in rows):.0f} tok/s, scheduler CPU "
          f"{statistics.median(x[1] for x in rows):.3f} ms/token, TTFT p50 {statistics.median(x[2] for x in rows):.0f} ms")
base = statistics.median(x[0] for x in results[intervals[0]])
for n in intervals[1:]:
    print(f"interval {n} / interval {intervals[0]} throughput: {statistics.median(x[0] for x in results[n]) / base:.3f}")
