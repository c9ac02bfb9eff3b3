"""Draft and step cost at one request (the step profile's timing, eagle_ngram timed as its head) of the shipped head
against another head dir of the same shape, 2 rounds: whether a retrained head costs more per draft.

    python3 bench/experiments/eagle_head_cost_ab.py OTHER_HEAD_DIR
"""
import time, statistics, torch, sys
from client.model_resolver import resolve_model
from executor_svc.config import ExecutorConfig
from executor_svc.drafters.shipped import SHIPPED_DIR
from executor_svc.server import build_runner
from executor_svc.step_profile import StepProfiler, timing_contexts, drafting_as_timed
from scheduler_svc.spec_profile import calibration_token_ids
from scheduler_svc.tokenizer import Tokenizer
model_dir = str(resolve_model(None))
SH=str(SHIPPED_DIR / "SmolLM2-135M-Instruct")
rs={}
for name, d in (("shipped",SH),("new",sys.argv[1])):
    runner, desc = build_runner(ExecutorConfig(model_dir=model_dir, spec_method="eagle_ngram", eagle_dir=d, num_spec_tokens=3, num_threads=2))
    texts = calibration_token_ids(Tokenizer.from_dir(model_dir), desc.vocab_size, 128)
    rs[name]=(runner, StepProfiler(runner, desc.num_kv_blocks), texts)
for rnd in range(2):
  for name,(runner,p,texts) in rs.items():
    for K in (1,3):
      with drafting_as_timed(runner):
        dummies = p._dummies(timing_contexts(texts, 1, 32), 600)
        runner.reset(); p._prefill(dummies, 3)
        ds=[];ts=[]
        for i in range(40):
            t=time.perf_counter(); r = runner.execute(p._decode_step(dummies, K, K)); ts.append(time.perf_counter()-t)
            if i>=10: ds.append(r.draft_s*1e3)
        runner.reset()
      print(rnd, name, "K", K, "draft ms %.2f"%statistics.median(ds), "step ms %.2f"%(statistics.median(ts[10:])*1e3), flush=True)
