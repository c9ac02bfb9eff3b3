"""Where the EAGLE head's drafting time goes at one request (default model, shipped head, timed as the step profile
times it): the head's decoder layer vs its draft-vocabulary logits, per call, and the whole draft phase per step; variants:
base, lm_bf16 (the LM rows in bfloat16), lm_flinear (F.linear instead of the weight-stationary product).

    python3 bench/experiments/eagle_draft_cost_split.py base|lm_bf16|lm_flinear
"""
import time, statistics, torch
from client.model_resolver import resolve_model
from executor_svc.config import ExecutorConfig
from executor_svc.server import build_runner
from executor_svc.step_profile import StepProfiler, timing_contexts, drafting_as_timed
from scheduler_svc.spec_profile import calibration_token_ids
from scheduler_svc.tokenizer import Tokenizer
import sys
variant = sys.argv[1]
model_dir = str(resolve_model(None))
runner, d = build_runner(ExecutorConfig(model_dir=model_dir, spec_method="auto", num_spec_tokens=3, num_threads=2))
texts = calibration_token_ids(Tokenizer.from_dir(model_dir), d.vocab_size, 128)
sm = runner.drafter.eagle.step_model
if variant == "lm_bf16":
    rows = sm.lm_rows.to(torch.bfloat16)
    from executor_svc.models.layers import linear
    sm.compute_logits = lambda h: linear(h.to(torch.bfloat16), rows).float()
if variant == "lm_flinear":
    import torch.nn.functional as F
    sm.compute_logits = lambda h: F.linear(h, sm.lm_rows).float()
times = {"head": [], "logits": [], "draft": []}
f0, f1 = sm.head.forward, sm.compute_logits
def head_fwd(*a, **k):
    t = time.perf_counter(); r = f0(*a, **k); times["head"].append(time.perf_counter() - t); return r
def logits(h):
    t = time.perf_counter(); r = f1(h); times["logits"].append(time.perf_counter() - t); return r
sm.head.forward = head_fwd; sm.compute_logits = logits
p = StepProfiler(runner, d.num_kv_blocks)
for K in (1, 3):
    for k in times: times[k].clear()
    drafts = []
    with drafting_as_timed(runner):
        dummies = p._dummies(timing_contexts(texts, 1, 32), 600)
        runner.reset(); p._prefill(dummies, 3)
        for i in range(60):
            r = runner.execute(p._decode_step(dummies, K, K))
            if i >= 10: drafts.append(r.draft_s * 1e3)
        runner.reset()
    print(variant, "K", K, "draft ms med %.2f" % statistics.median(drafts), "head calls/step %.1f med %.3f ms" % (len(times["head"]) / 60, statistics.median(times["head"]) * 1e3),
          "logits calls/step %.1f med %.3f ms" % (len(times["logits"]) / 60, statistics.median(times["logits"]) * 1e3))
