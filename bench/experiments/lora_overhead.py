"""What serving a LoRA adapter costs: the default model with a random rank-R adapter on every projection, MT-Bench
first turns (greedy, ignore_eos, fixed length), requests naming the adapter vs the base model on the same stack,
alternating rounds, medians. At c=8 also a mixed load: two streams of 4, one naming the adapter, side by side.

    PYTHONPATH=.:tests/executor_svc python3 bench/experiments/lora_overhead.py [ROUNDS] [RANK]
"""
import statistics
import sys
import tempfile
from pathlib import Path

from tiny_adapters import make_peft_adapter

from client.bench.load import run_load
from client.bench.prompt_sets import load_prompts
from client.model_resolver import resolve_model
from client.stack import LocalStack

MAX_TOKENS = 64
PROMPTS_PER_RUN = {1: 8, 8: 16}
MODES = {1: ("", "adapter"), 8: ("", "adapter", "mixed")}


def tok_s(address: str, concurrency: int, model: str) -> float:
    prompts = load_prompts("mtbench")[: PROMPTS_PER_RUN[concurrency]]
    if model == "mixed":  # every other prompt with the adapter: two loads at half concurrency each, side by side
        import threading

        results = {}
        threads = [threading.Thread(target=lambda m=m: results.__setitem__(m, run_load(
            address, prompts[i::2], max(1, concurrency // 2), MAX_TOKENS, ignore_eos=True, model=m)))
            for i, m in enumerate(("", "adapter"))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        tokens = sum(r.num_tokens for result in results.values() for r in result.records)
        return tokens / max(result.wall_s for result in results.values())
    result = run_load(address, prompts, concurrency, MAX_TOKENS, ignore_eos=True, model=model)
    return sum(r.num_tokens for r in result.records) / result.wall_s


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    rank = int(sys.argv[2]) if len(sys.argv) > 2 else 16
    model = resolve_model(None)
    adapter = make_peft_adapter(model, Path(tempfile.mkdtemp(prefix="lora-bench-")) / "adapter", seed=1, rank=rank,
                                alpha=2.0 * rank, scale=0.02)
    stack = LocalStack(str(model), ["--spec-method", "none", "--num-threads", "2", "--lora-modules",
                                    f"adapter={adapter}"], ["--no-enable-prefix-caching"])
    stack.start(timeout_s=900)
    try:
        tok_s(stack.address, 1, "")  # warm-up
        figures: dict[tuple[int, str], list[float]] = {}
        for round_index in range(rounds):
            for concurrency in (1, 8):
                for name in MODES[concurrency]:
                    value = tok_s(stack.address, concurrency, name)
                    figures.setdefault((concurrency, name), []).append(value)
                    print(f"round {round_index} c={concurrency} {name or 'base'}: {value:.1f} tok/s", flush=True)
    finally:
        stack.stop()
    print(f"\nrank {rank}, {MAX_TOKENS} tokens per request, medians of {rounds} alternating rounds")
    for concurrency in (1, 8):
        base = statistics.median(figures[(concurrency, "")])
        for name in MODES[concurrency]:
            median = statistics.median(figures[(concurrency, name)])
            print(f"c={concurrency} {name or 'base':8s} {median:7.1f} tok/s  {median / base:.3f}x base")


if __name__ == "__main__":
    main()
