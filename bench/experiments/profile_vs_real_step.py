"""Why the step profile prices K = 2-3 lower than the stack pays at c = 1 (eagle_ngram, default model): time the
profiler's own dummy decode (its periodic token prompt) and a decode of natural-text prompts (the calibration
prompts) with the same runner, every K in alternating cycles, and split each step into forward, sample and draft time
and into n-gram vs head proposals.

    python3 bench/experiments/profile_vs_real_step.py [cycles] [num_threads]
"""

from __future__ import annotations

import statistics
import sys
import time

import torch

from client.model_resolver import resolve_model
from executor_svc.config import ExecutorConfig
from executor_svc.server import build_runner
from executor_svc.step_profile import StepProfiler, cycle_order
from scheduler_svc.spec_profile import calibration_token_ids
from scheduler_svc.tokenizer import Tokenizer

MAX_K = 3


def main() -> None:
    cycles = int(sys.argv[1]) if len(sys.argv) > 1 else 12
    threads = int(sys.argv[2]) if len(sys.argv) > 2 else 2
    model_dir = str(resolve_model(None))
    runner, description = build_runner(ExecutorConfig(model_dir=model_dir, spec_method="auto",
                                                      num_spec_tokens=MAX_K, num_threads=threads))
    print("drafter", type(runner.drafter).__name__, "threads", torch.get_num_threads())
    counts = {"ngram": 0, "head": 0}
    drafter = runner.drafter
    original_propose = drafter.ngram.propose

    def counting_propose(batch):
        proposals = original_propose(batch)
        counts["ngram"] += sum(1 for p in proposals if p)
        counts["head"] += sum(1 for p in proposals if not p)
        return proposals

    drafter.ngram.propose = counting_propose
    tokenizer = Tokenizer.from_dir(model_dir)
    natural = calibration_token_ids(tokenizer, description.vocab_size, 128)[0]
    periodic = [(7 * i) % 97 + 3 for i in range(32)]
    profiler = StepProfiler(runner, description.num_kv_blocks)
    for name, prompt in (("profiler prompt", periodic), ("natural prompt", natural)):
        dummies = profiler._dummies([list(prompt)], StepProfiler._timing_tokens(MAX_K, len(prompt), cycles))
        runner.reset()
        profiler._prefill(dummies, MAX_K)
        rows: dict[int, list[tuple[float, float, float, float]]] = {k: [] for k in range(MAX_K + 1)}
        counts.update(ngram=0, head=0)
        per_k_counts = {k: [0, 0] for k in range(MAX_K + 1)}
        for cycle in range(cycles + 1):
            for k in cycle_order(cycle, MAX_K):
                before = dict(counts)
                step = profiler._decode_step(dummies, k, k)
                start = time.perf_counter()
                result = runner.execute(step)
                total = 1000 * (time.perf_counter() - start)
                if cycle:
                    rows[k].append((total, 1000 * result.forward_s, 1000 * result.sample_s, 1000 * result.draft_s))
                    per_k_counts[k][0] += counts["ngram"] - before["ngram"]
                    per_k_counts[k][1] += counts["head"] - before["head"]
        runner.reset()
        print(f"{name} ({len(prompt)} tokens), medians over {cycles} cycles, ms:")
        for k, samples in rows.items():
            med = [statistics.median(s[i] for s in samples) for i in range(4)]
            print(f"  K={k}: step {med[0]:6.1f}  forward {med[1]:6.1f}  sample {med[2]:5.1f}  draft {med[3]:5.1f}"
                  f"   proposals ngram/head {per_k_counts[k][0]}/{per_k_counts[k][1]}")


if __name__ == "__main__":
    main()
