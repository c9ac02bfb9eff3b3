"""What scoring a prompt costs: prefill time of the default model with and without prompt_logprobs.

The stack as `stepahead serve` runs it (prefix caching on: every prompt starts with its own round and setting, so
none is cached), 4 prompts of 290-620 tokens (MT-Bench first turns joined), max_tokens 1, one at a time; time to the first message, 3 alternating
rounds, medians. Scoring computes the LM head (576 x 49,152) for every prompt row instead of only the last.
    PYTHONPATH=.:proto python3 bench/experiments/prompt_logprobs_cost.py"""
import statistics, time
from client import Client
from client.model_resolver import resolve_model
from client.mtbench import load_mtbench_first_turns
from client.stack import LocalStack

def main():
    turns = load_mtbench_first_turns()
    prompts = [" ".join(turns[i * 8:(i + 1) * 8]) + f" (variant {i})" for i in range(4)]
    stack = LocalStack(str(resolve_model(None)), ["--num-threads", "2"], [])
    stack.start(timeout_s=600)
    try:
        with Client(stack.address) as client:
            lengths = [client.tokenize(p).count for p in prompts]
            print("prompt tokens:", lengths)
            client.generate(prompt="warm up", max_tokens=1, prompt_logprobs=1)
            table = {}
            for round_ in range(3):
                for label, extra in (("none", {}), ("prompt_logprobs=0", {"prompt_logprobs": 0}),
                                     ("prompt_logprobs=5", {"prompt_logprobs": 5})):
                    times = []
                    for index, prompt in enumerate(prompts):
                        start = time.perf_counter()
                        result = client.generate(prompt=f"Round {round_}, {label}: {prompt}", max_tokens=1, temperature=0.0,
                                                 **extra)
                        times.append(time.perf_counter() - start)
                        assert len(result.prompt_logprobs) == (result.usage.prompt_tokens - 1 if extra else 0)
                    table.setdefault(label, []).append(sum(times) / sum(lengths) * 1e3)
                    print(f"round {round_} {label:18s} {table[label][-1]:.3f} ms per prompt token", flush=True)
            base = statistics.median(table["none"])
            for label, rows in table.items():
                print(f"median {label:18s} {statistics.median(rows):.3f} ms per prompt token "
                      f"({statistics.median(rows) / base:.2f}x)")
    finally:
        stack.stop()

if __name__ == "__main__":
    main()
