"""A/B of two step-profile methods on one executor, alternating: the format-2 profile (64-token contexts, calibration
prompts cut to 256 tokens, a warm-up cycle for every batch size, at least 3 timing cycles) against the format-3 one
now on main (32-token contexts, prompts cut to 128, a warm-up cycle for the first batch size only, at least 2 cycles).
Prints each profile's time, its step-time table, its acceptance prior and the K the dynamic policy picks per batch
size under that prior and under a fixed prior of 0.5 per position.

    OMP_NUM_THREADS=1 python3 bench/experiments/profile_method_ab.py [rounds]
"""

from __future__ import annotations

import sys
import time

import torch

import executor_svc.step_profile as step_profile
from client.model_resolver import resolve_model
from executor_svc.config import ExecutorConfig
from executor_svc.profile_service import run_profile
from executor_svc.server import build_runner
from scheduler_svc import spec_profile
from scheduler_svc.dynamic_k import DynamicKPolicy, StepTimeProfile
from scheduler_svc.spec_profile import batch_grid, from_proto, profile_request
from scheduler_svc.tokenizer import Tokenizer

METHODS = {
    "format2": dict(context=64, prompt_cap=256, min_cycles=3, warm_every_batch=True),
    "format3": dict(context=32, prompt_cap=128, min_cycles=2, warm_every_batch=False),
}


def measure(runner, description, tokenizer, method: dict) -> tuple[float, object]:
    spec_profile.CONTEXT_LEN = method["context"]
    spec_profile.MAX_CALIBRATION_PROMPT = method["prompt_cap"]
    step_profile.MIN_CYCLES = method["min_cycles"]
    original = step_profile.StepProfiler.step_times_ms

    def every_batch_warm(self, batch_sizes, max_k, context_len=64, repeats=step_profile.MAX_CYCLES, texts=None):
        return [self._time_batch(step_profile.timing_contexts(texts, size, context_len), max_k, repeats,
                                 warm_every_k=True) for size in batch_sizes]

    if method["warm_every_batch"]:
        step_profile.StepProfiler.step_times_ms = every_batch_warm
    try:
        request = profile_request(tokenizer, description, batch_grid(64))
        started = time.perf_counter()
        reply = run_profile(runner, description, request)
        return time.perf_counter() - started, from_proto(reply)
    finally:
        step_profile.StepProfiler.step_times_ms = original


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 1
    torch.set_num_threads(1)
    model_dir = str(resolve_model(None))
    runner, description = build_runner(ExecutorConfig(model_dir=model_dir, spec_method="auto", num_spec_tokens=5))
    tokenizer = Tokenizer.from_dir(model_dir)
    for round_index in range(rounds):
        order = list(METHODS) if round_index % 2 == 0 else list(METHODS)[::-1]
        for name in order:
            seconds, profile = measure(runner, description, tokenizer, METHODS[name])
            policy = DynamicKPolicy(profile)
            # The same table under one fixed prior: differences here come from the step times alone.
            fixed = DynamicKPolicy(StepTimeProfile(profile.batch_sizes, profile.step_ms, (0.5,) * 5))
            print(f"round {round_index} {name}: {seconds:.1f} s", flush=True)
            for size, row in zip(profile.batch_sizes, profile.step_ms):
                print(f"  B={size:<3d} K*={policy.best_k(size)} (prior 0.5: {fixed.best_k(size)})  "
                      f"ITL(K=0..5) ms {[round(v) for v in row]}")
            print(f"  acceptance prior {[round(a, 3) for a in profile.acceptance_prior]}", flush=True)


if __name__ == "__main__":
    main()
