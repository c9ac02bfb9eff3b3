"""Randomized sync-vs-async stress on a tiny random Llama (vocab 400): for each seed, a random workload
(greedy and seeded sampling with penalties, min_p, logprobs, stop strings and stop tokens,
min_tokens, max_tokens from 1 to 50, cancellations after 1 to 8 tokens) runs, all requests at once,
against stacks with 1, 2 and 3 steps in flight. Token ids, text and finish reasons must be
identical (logprobs within 2e-3), and every KV block free afterwards. Prints each mismatch.

    PYTHONPATH=.:proto:tests/stack:tests/executor_svc:tests/scheduler_svc:tests/fixtures \\
        python bench/experiments/stress_sync_async.py --seeds 0:25 --configs plain,ngram
"""
import argparse
import random
import tempfile
import time
from pathlib import Path

from simultaneous import run_simultaneously
from test_async_equivalence import stream_request
from tiny_models import make_tiny_llama
from tiny_tokenizers import build_byte_level

from client import Client
from client.stack import LocalStack

DRAFT = "<draft model>"
TARGET = "<target model>"
CONFIGS = {
    "plain": ([], []),
    "chunk_preempt": (["--num-kv-blocks", "10"], ["--max-num-batched-tokens", "32"]),
    "ngram": (["--spec-method", "ngram", "--num-spec-tokens", "3"], []),
    "ngram_preempt": (["--spec-method", "ngram", "--num-spec-tokens", "2", "--num-kv-blocks", "12"],
                      ["--max-num-batched-tokens", "40"]),
    "draft": (["--spec-method", "draft_model", "--draft-model", DRAFT, "--num-spec-tokens", "3"], []),
    "draft_preempt": (["--spec-method", "draft_model", "--draft-model", DRAFT, "--num-spec-tokens", "2",
                       "--num-kv-blocks", "12"], ["--max-num-batched-tokens", "40"]),
    "self_draft_preempt": (["--spec-method", "draft_model", "--draft-model", TARGET, "--num-spec-tokens", "2",
                            "--num-kv-blocks", "12"], ["--max-num-batched-tokens", "40"]),
    # The executor launches step N+1 before step N's tokens are read back (the CUDA default).
    "deferred_chunk_preempt": (["--defer-token-readback", "on", "--num-kv-blocks", "10"],
                               ["--max-num-batched-tokens", "32"]),
    "deferred_ngram_preempt": (["--defer-token-readback", "on", "--spec-method", "ngram", "--num-spec-tokens", "2",
                                "--num-kv-blocks", "12"], ["--max-num-batched-tokens", "40"]),
}


def workload(seed: int) -> list[dict]:
    rng = random.Random(seed)
    requests = []
    for _ in range(rng.randrange(4, 14)):
        prompt = [rng.randrange(3, 400) for _ in range(rng.choice([1, 3, 17, 33, 64, 90]))]
        params = dict(max_tokens=rng.choice([1, 2, 7, 25, 50]), ignore_eos=rng.random() < 0.7)
        if rng.random() < 0.5:
            params.update(temperature=rng.choice([0.5, 1.0]), top_p=rng.choice([0.8, 1.0]),
                          top_k=rng.choice([-1, 5, 50]), seed=rng.randrange(1000),
                          repetition_penalty=rng.choice([1.0, 1.3]), presence_penalty=rng.choice([0.0, 0.5]),
                          frequency_penalty=rng.choice([0.0, 0.4]), min_p=rng.choice([0.0, 0.05]),
                          logprobs=rng.choice([0, 3]))
        else:
            params.update(temperature=0.0, logprobs=rng.choice([0, 1]))
        if rng.random() < 0.3:
            params["stop_token_ids"] = [rng.randrange(3, 400) for _ in range(rng.randrange(1, 30))]
        if rng.random() < 0.3:
            params["stop"] = rng.choice([["e"], ["a ", "x"], ["th"]])
        if rng.random() < 0.2:
            params["min_tokens"] = min(params["max_tokens"], rng.randrange(0, 10))
        requests.append({"prompt": prompt, "params": params, "cancel_after": rng.choice([None, None, None, 1, 3, 8])})
    return requests


def same(got: tuple, want: tuple) -> bool:
    if got[-1] == "cancelled" or want[-1] == "cancelled":
        return got == want
    return (got[0], got[2], got[3]) == (want[0], want[2], want[3]) and len(got[1]) == len(want[1]) and all(
        abs(a - b) <= 2e-3 for a, b in zip(got[1], want[1]))


def settled(address: str) -> bool:
    """Every KV block free and nothing running or waiting, within 5 s (cancellations land async)."""
    for _ in range(50):
        with Client(address) as client:
            info = client.model_info()
        if info.num_free_kv_blocks == info.num_kv_blocks and info.num_running == 0 and info.num_waiting == 0:
            return True
        time.sleep(0.1)
    return False


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", default="0:25", help="first:end of the workload seeds")
    parser.add_argument("--configs", default=",".join(CONFIGS))
    args = parser.parse_args()
    first, end = map(int, args.seeds.split(":"))
    target, draft = Path(tempfile.mkdtemp()), Path(tempfile.mkdtemp())
    for directory, seed in ((target, 0), (draft, 1)):
        build_byte_level(directory)
        make_tiny_llama(directory, seed=seed, vocab_size=400)
    failures = 0
    for name in args.configs.split(","):
        executor_flags, scheduler_flags = CONFIGS[name]
        executor_flags = [{DRAFT: str(draft), TARGET: str(target)}.get(flag, flag) for flag in executor_flags]
        stacks = {n: LocalStack(str(target), executor_flags, [*scheduler_flags, "--max-inflight-steps", str(n)])
                  for n in (1, 2, 3)}
        try:
            for stack in stacks.values():
                stack.start()
            comparisons = 0
            for seed in range(first, end):
                requests = workload(seed)
                outputs = {}
                for n, stack in stacks.items():
                    outputs[n] = run_simultaneously(stack.address, stream_request, requests)
                    if not settled(stack.address):
                        failures += 1
                        print(f"LEAK {name} seed {seed} inflight {n}", flush=True)
                for n in (2, 3):
                    comparisons += 1
                    for index, (got, want) in enumerate(zip(outputs[n], outputs[1])):
                        if not same(got, want):
                            failures += 1
                            print(f"MISMATCH {name} seed {seed} inflight {n} request {index} {requests[index]}\n"
                                  f"  sync  {want}\n  async {got}", flush=True)
            print(f"done {name}: seeds {first}..{end - 1}, {comparisons} async-vs-sync comparisons", flush=True)
        finally:
            for stack in stacks.values():
                stack.stop()
    print("failures", failures)


if __name__ == "__main__":
    main()
