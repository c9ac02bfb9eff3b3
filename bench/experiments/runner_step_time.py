"""Median ModelRunner.execute time of 300 greedy decode steps at batch 16 on the small checkpoint,
in-process (no gRPC, no scheduler): the executor's own per-step cost, to compare two commits.

    cd CLONE && PYTHONPATH=.:proto python bench/experiments/runner_step_time.py LABEL
(needs the small checkpoint that `stepahead bench --small-model` builds in the cache)"""
import statistics
import sys
import time

import torch

from executor_svc.config import ExecutorConfig
from executor_svc.server import build_runner
from stepahead_proto import executor_pb2, sampling_pb2

torch.set_num_threads(1)
model = "/root/.cache/stepahead/models/small-random-llama"
runner, _ = build_runner(ExecutorConfig(model_dir=model, num_kv_blocks=600, num_threads=1))
B, P, N = 16, 100, 300
step = executor_pb2.StepRequest(step_id=0)
for i in range(B):
    step.new_requests.add(request_id=f"r{i}", prompt_token_ids=[(7 * i + j) % 500 + 3 for j in range(P)],
                          sampling=sampling_pb2.SamplingParams(temperature=0.0), block_ids=list(range(i * 30, i * 30 + 30)),
                          num_scheduled_tokens=P)
runner.execute(step)
times = []
for s in range(1, N + 1):
    step = executor_pb2.StepRequest(step_id=s)
    for i in range(B):
        step.cached_requests.add(request_id=f"r{i}", num_computed_tokens=P + s - 1, num_scheduled_tokens=1)
    t = time.perf_counter(); runner.execute(step); times.append(time.perf_counter() - t)
print(sys.argv[1], "median ms %.3f  p10 %.3f" % (statistics.median(times) * 1e3, sorted(times)[len(times)//10] * 1e3))
