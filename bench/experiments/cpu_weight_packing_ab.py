"""A/B of the oneDNN-packed CPU weights (--no-cpu-weight-packing off): alternating rounds on fresh stacks of the
default model, per configuration given as executor flags; per round tok/s, TTFT p50 and (with a drafter) the
acceptance length; then medians and on/off ratios. The greedy outputs of three prompts, generated again after each
run, must be identical with and without the packs (checked).

    [SCHEDULER_FLAGS="..."] python3 bench/experiments/cpu_weight_packing_ab.py ROUNDS CONCURRENCY NUM_PROMPTS
        MAX_TOKENS [EXECUTOR FLAG...]
"""
import os
import statistics
import sys

from client import Client
from client.bench.load import run_load
from client.bench.stats import speculation_summary, summarize
from client.mtbench import load_mtbench_first_turns
from client.model_resolver import ensure_default_model
from client.stack import LocalStack

rounds, concurrency, num_prompts, max_tokens = (int(v) for v in sys.argv[1:5])
extra = sys.argv[5:]
model = str(ensure_default_model())
prompts = load_mtbench_first_turns()[:num_prompts]
results: dict[bool, list[tuple[float, float, float]]] = {False: [], True: []}
outputs: dict[bool, list] = {}
for r in range(rounds):
    for packed in ((False, True) if r % 2 == 0 else (True, False)):
        flags = ["--num-threads", "2", *extra] + ([] if packed else ["--no-cpu-weight-packing"])
        scheduler_flags = ["--no-enable-prefix-caching", *os.environ.get("SCHEDULER_FLAGS", "").split()]
        with LocalStack(model, flags, scheduler_flags) as stack:
            result = run_load(stack.address, prompts, concurrency, max_tokens, ignore_eos=True)
            with Client(stack.address) as client:
                tokens = [list(client.generate(messages=[{"role": "user", "content": p}], max_tokens=32,
                                               temperature=0.0).token_ids) for p in prompts[:3]]
        summary, spec = summarize(result), speculation_summary(result)
        row = (summary["throughput_tok_s"], summary["ttft_ms_p50"], spec.get("mean_acceptance_length", 1.0))
        results[packed].append(row)
        print(f"round {r} packed {'on ' if packed else 'off'}: {row[0]:.1f} tok/s, TTFT p50 {row[1]:.0f} ms, "
              f"AL {row[2]:.3f}", flush=True)
        assert outputs.setdefault(packed, tokens) == tokens
assert outputs[False] == outputs[True], "outputs differ with the packs"
for packed, rows in results.items():
    print(f"packed {'on ' if packed else 'off'}: median {statistics.median(x[0] for x in rows):.1f} tok/s, TTFT p50 "
          f"{statistics.median(x[1] for x in rows):.0f} ms, AL {statistics.median(x[2] for x in rows):.3f}")
print(f"on / off throughput: {statistics.median(x[0] for x in results[True]) / statistics.median(x[0] for x in results[False]):.3f}")
