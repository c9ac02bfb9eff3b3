"""Step-time ratios ITL(B, K) / ITL(B, 0) of the step profiler at B = 1 and 2 (default model, eagle_ngram, K 0..3,
timing contexts from the calibration prompts), repeated, to see their spread and compare them with what the stack
pays (executor step time per K in a `stepahead bench --sweep` run).

    python3 bench/experiments/profile_b1_ratios.py [rounds] [cycles ...]
"""
import sys

from client.model_resolver import resolve_model
from executor_svc import step_profile
from executor_svc.config import ExecutorConfig
from executor_svc.server import build_runner
from executor_svc.step_profile import StepProfiler, timing_contexts
from scheduler_svc.spec_profile import calibration_token_ids
from scheduler_svc.tokenizer import Tokenizer

rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 4
cycle_counts = [int(arg) for arg in sys.argv[2:]] or [8]
step_profile.BATCH_BUDGET_S = 1e9
model_dir = str(resolve_model(None))
runner, description = build_runner(ExecutorConfig(model_dir=model_dir, spec_method="auto", num_spec_tokens=3,
                                                  num_threads=2))
texts = calibration_token_ids(Tokenizer.from_dir(model_dir), description.vocab_size, 128)
profiler = StepProfiler(runner, description.num_kv_blocks)
results: dict[tuple[int, int], list[list[float]]] = {}
for round_index in range(rounds):
    for cycles in cycle_counts if round_index % 2 == 0 else cycle_counts[::-1]:
        for batch in (1, 2):
            row = profiler._time_batch(timing_contexts(texts, batch, 32), 3, cycles, warm_every_k=True)
            results.setdefault((cycles, batch), []).append([round(v / row[0], 3) for v in row])
for (cycles, batch), rows in results.items():
    print(f"cycles {cycles} B={batch}: {rows}")
    print(f"   K=1 {min(r[1] for r in rows)}-{max(r[1] for r in rows)}  K=3 {min(r[3] for r in rows)}-{max(r[3] for r in rows)}")
