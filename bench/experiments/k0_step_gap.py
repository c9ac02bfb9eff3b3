"""K=0 decode steps: executor without a drafter vs with an n-gram drafter (K_max 5), alternating, B=4."""
import statistics, time
from executor_svc.config import ExecutorConfig
from executor_svc.server import build_runner
from executor_svc.step_profile import StepProfiler
from client.model_resolver import resolve_model

M = str(resolve_model(None))  # the default model
setups = {}
for name, cfg in {"none": ExecutorConfig(model_dir=M, spec_method="none", num_threads=2),
                  "ngram": ExecutorConfig(model_dir=M, spec_method="ngram", num_spec_tokens=5, num_threads=2)}.items():
    runner, desc = build_runner(cfg)
    prof = StepProfiler(runner, desc.num_kv_blocks)
    dummies = prof._dummies([[(7 * i) % 97 + 3 for i in range(64)] for _ in range(4)], 64 + 400)
    runner.reset(); prof._prefill(dummies, 0)
    setups[name] = (runner, prof, dummies)
times = {n: [] for n in setups}
for cycle in range(40):
    for name in (setups if cycle % 2 == 0 else list(setups)[::-1]):
        runner, prof, dummies = setups[name]
        step = prof._decode_step(dummies, 0, 0)
        s = time.perf_counter(); runner.execute(step); times[name].append(1000 * (time.perf_counter() - s))
for n, t in times.items():
    print(n, "median", round(statistics.median(t[4:]), 1), "ms")
print("median ratio none/ngram", round(statistics.median(a / b for a, b in zip(times["none"][4:], times["ngram"][4:])), 3))
