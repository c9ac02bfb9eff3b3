"""A/B of the step profile's timing contexts on one executor (default model, eagle_ngram, K_max 3), alternating:
the synthetic periodic context (before) against the calibration prompts' last tokens (natural text, after). Run
before step_profile.drafting_as_timed existed (`contexts-ab-3rounds.log`); with it both variants time the head.
Prints each profile's table and the K the dynamic policy picks per batch size under the acceptance measured in
the stack at c = 1 on MT-Bench (0.40, 0.33, 0.44: bench/results/cpu_packing/sweep-*) and under the profile's prior.

    python3 bench/experiments/profile_contexts_ab.py [rounds] [num_threads]
"""

from __future__ import annotations

import sys
import time

from client.model_resolver import resolve_model
from executor_svc import step_profile
from executor_svc.config import ExecutorConfig
from executor_svc.profile_service import run_profile
from executor_svc.server import build_runner
from scheduler_svc.dynamic_k import DynamicKPolicy, StepTimeProfile
from scheduler_svc.spec_profile import from_proto, profile_request
from scheduler_svc.tokenizer import Tokenizer

LIVE_RATES = (0.40, 0.33, 0.44)
GRID = (1, 2, 4, 8, 16)


def measure(runner, description, tokenizer, natural: bool) -> tuple[float, StepTimeProfile]:
    original = step_profile.StepProfiler.step_times_ms

    def synthetic(self, batch_sizes, max_k, context_len=64, repeats=step_profile.MAX_CYCLES, texts=None):
        return original(self, batch_sizes, max_k, context_len, repeats, texts=None)

    if not natural:
        step_profile.StepProfiler.step_times_ms = synthetic
    try:
        started = time.perf_counter()
        reply = run_profile(runner, description, profile_request(tokenizer, description, GRID))
        return time.perf_counter() - started, from_proto(reply)
    finally:
        step_profile.StepProfiler.step_times_ms = original


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    threads = int(sys.argv[2]) if len(sys.argv) > 2 else 2
    model_dir = str(resolve_model(None))
    runner, description = build_runner(ExecutorConfig(model_dir=model_dir, spec_method="auto", num_spec_tokens=3,
                                                      num_threads=threads))
    tokenizer = Tokenizer.from_dir(model_dir)
    for round_index in range(rounds):
        order = [False, True] if round_index % 2 == 0 else [True, False]
        for natural in order:
            seconds, profile = measure(runner, description, tokenizer, natural)
            live = DynamicKPolicy(StepTimeProfile(profile.batch_sizes, profile.step_ms, LIVE_RATES))
            prior = DynamicKPolicy(profile)
            name = "natural" if natural else "synthetic"
            print(f"round {round_index} {name}: {seconds:.1f} s, prior {[round(a, 3) for a in profile.acceptance_prior]}")
            for size, row in zip(profile.batch_sizes, profile.step_ms):
                ratios = [round(v / row[0], 2) for v in row]
                print(f"  B={size:<3d} K* live {live.best_k(size)} prior {prior.best_k(size)}  "
                      f"ITL ms {[round(v, 1) for v in row]}  /K=0 {ratios}", flush=True)


if __name__ == "__main__":
    main()
