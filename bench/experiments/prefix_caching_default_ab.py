"""A/B of prefix caching in the default configuration (default model, `eagle_ngram` with dynamic K, one step
ahead): MT-Bench first turns through the chat template, each prompt once per run, so the cache finds only the
template's shared system prompt. Alternating rounds on fresh stacks; per round tok/s, TTFT p50, the drafter's
acceptance length and the prefix-cache hit share; then medians. The greedy outputs of three prompts, generated
again after each run, must be identical with and without the cache (checked).

    python3 bench/experiments/prefix_caching_default_ab.py ROUNDS CONCURRENCY NUM_PROMPTS MAX_TOKENS
"""
import statistics
import sys

from client import Client
from client.bench.load import run_load
from client.bench.stats import speculation_summary, summarize
from client.mtbench import load_mtbench_first_turns
from client.model_resolver import ensure_default_model
from client.stack import LocalStack

rounds, concurrency, num_prompts, max_tokens = (int(v) for v in sys.argv[1:5])
model = str(ensure_default_model())
prompts = load_mtbench_first_turns()[:num_prompts]
results: dict[bool, list[tuple[float, float, float, float]]] = {False: [], True: []}
outputs: dict[bool, list] = {}
for r in range(rounds):
    for cache in ((False, True) if r % 2 == 0 else (True, False)):
        flags = ["--enable-prefix-caching" if cache else "--no-enable-prefix-caching"]
        with LocalStack(model, ["--num-threads", "2"], flags) as stack:
            result = run_load(stack.address, prompts, concurrency, max_tokens, ignore_eos=True)
            with Client(stack.address) as client:
                stats = client.model_info().stats
                tokens = [list(client.generate(messages=[{"role": "user", "content": p}], max_tokens=32,
                                               temperature=0.0).token_ids) for p in prompts[:3]]
        summary, spec = summarize(result), speculation_summary(result)
        hit = stats.prefix_cache_hit_tokens / max(1, stats.prefix_cache_queried_tokens)
        row = (summary["throughput_tok_s"], summary["ttft_ms_p50"], spec.get("mean_acceptance_length", 1.0), hit)
        results[cache].append(row)
        print(f"round {r} cache {'on ' if cache else 'off'}: {row[0]:.1f} tok/s, TTFT p50 {row[1]:.0f} ms, "
              f"AL {row[2]:.3f}, prompt tokens found cached {row[3]:.1%}", flush=True)
        assert outputs.setdefault(cache, tokens) == tokens
assert outputs[False] == outputs[True], "outputs differ with the cache"
for cache, rows in results.items():
    print(f"cache {'on ' if cache else 'off'}: median {statistics.median(x[0] for x in rows):.1f} tok/s, TTFT p50 "
          f"{statistics.median(x[1] for x in rows):.0f} ms, AL {statistics.median(x[2] for x in rows):.3f}, "
          f"cached {statistics.median(x[3] for x in rows):.1%}")
print(f"on / off throughput: {statistics.median(x[0] for x in results[True]) / statistics.median(x[0] for x in results[False]):.3f}")
