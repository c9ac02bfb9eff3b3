"""A/B of --enable-prefix-caching on the default model: requests that share a long document and differ in their
question (a RAG / shared system prompt workload), sent at concurrency C, greedy, 32 tokens each. Alternating
rounds on fresh stacks; per round tok/s, TTFT p50 and the prefix-cache hit share; then medians. Outputs must be
identical with and without the cache (checked).

    python3 bench/experiments/prefix_caching_ttft.py ROUNDS CONCURRENCY
"""
import pydoc_data.topics
import statistics
import sys

from client import Client
from client.bench.load import run_load
from client.bench.stats import summarize
from client.model_resolver import ensure_default_model
from client.stack import LocalStack

rounds, concurrency = int(sys.argv[1]), int(sys.argv[2])
model = str(ensure_default_model())
document = pydoc_data.topics.topics["assignment"][:4000]
questions = ["Summarise the text in one sentence.", "What is an augmented assignment?", "List three rules it gives.",
             "Explain the first paragraph to a beginner.", "What does the text say about slicing?",
             "Give an example that follows the text.", "Which targets can be assigned to?",
             "What happens with a starred target?"]
prompts = [f"{document}\n\nQuestion {i}: {q}" for i in range(2) for q in questions]
results: dict[bool, list[tuple[float, float, float]]] = {False: [], True: []}
outputs: dict[bool, list] = {}
for r in range(rounds):
    for cache in ((False, True) if r % 2 == 0 else (True, False)):
        flags = ["--enable-prefix-caching"] if cache else ["--no-enable-prefix-caching"]
        with LocalStack(model, ["--num-threads", "2"], flags) as stack:
            result = run_load(stack.address, prompts, concurrency, 32, ignore_eos=True)
            with Client(stack.address) as client:
                stats = client.model_info().stats
                texts = [list(client.generate(messages=[{"role": "user", "content": p}], max_tokens=32,
                                              temperature=0.0).token_ids) for p in prompts[:4]]
        summary = summarize(result)
        hit = stats.prefix_cache_hit_tokens / max(1, stats.prefix_cache_queried_tokens)
        results[cache].append((summary["throughput_tok_s"], summary["ttft_ms_p50"], hit))
        assert outputs.setdefault(cache, texts) == texts
        print(f"round {r} cache={'on' if cache else 'off'}: {summary['throughput_tok_s']:.1f} tok/s, TTFT p50 "
              f"{summary['ttft_ms_p50']:.0f} ms, hit share {hit:.2f}", flush=True)
assert outputs[True] == outputs[False], "outputs differ with the prefix cache"
for cache in (False, True):
    tok_s, ttft, hit = (statistics.median(v) for v in zip(*results[cache]))
    print(f"median cache={'on' if cache else 'off'}: {tok_s:.1f} tok/s, TTFT p50 {ttft:.0f} ms, hit share {hit:.2f}")
print("outputs identical with and without the cache")
