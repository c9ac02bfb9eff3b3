"""One stack (default model, eagle_ngram drafting up to 3, inflight 2), MT-Bench first turns one at a time (c=1, greedy,
128 tokens), with the scheduler's --num-spec-tokens given (1 or dynamic; none: no drafter); prints tok/s, steps, drafts. With the
site folder on PYTHONPATH and KTRACE=FILE, the dynamic policy's every choice (batch, K, acceptance estimate) and
every verify are logged to FILE.<pid>. EAGLE_DIR=DIR drafts with that head instead of the shipped one.

    NPROMPTS=16 KTRACE=/tmp/ktrace PYTHONPATH=bench/experiments/dynamic_k_trace/site:$PYTHONPATH \
        python3 bench/experiments/dynamic_k_trace/run.py dynamic
"""
import sys, time, os
from client import Client
from client.stack import LocalStack
from client.mtbench import load_mtbench_first_turns
from client.model_resolver import resolve_model
model = str(resolve_model(None))
kind = sys.argv[1]
if kind == "none":  # no drafter at all
    sched, executor = ["--max-inflight-steps", "2"], ["--num-threads", "2", "--spec-method", "none"]
else:
    sched = ["--max-inflight-steps", "2", "--num-spec-tokens", kind]
    executor = ["--num-threads", "2", "--spec-method", "eagle_ngram", "--num-spec-tokens", "3"]
    if os.environ.get("EAGLE_DIR"):
        executor += ["--eagle-drafter", os.environ["EAGLE_DIR"]]
stack = LocalStack(model, executor, sched)
stack.start()
try:
    prompts = load_mtbench_first_turns(int(os.environ.get("NPROMPTS", "8")))
    with Client(stack.address) as c:
        c.generate(messages=[{"role": "user", "content": "hi"}], max_tokens=8, temperature=0)
        base = c.model_info().stats
        t = time.time(); n = 0
        for p in prompts:
            r = c.generate(messages=[{"role": "user", "content": p}], max_tokens=128, temperature=0)
            n += len(r.token_ids)
        dt = time.time() - t
        s = c.model_info().stats
    print(kind, f"tok/s {n/dt:.1f} steps {s.steps-base.steps} drafted {s.spec_drafted-base.spec_drafted} accepted {s.spec_accepted-base.spec_accepted} tokens {n}", flush=True)
finally:
    stack.stop()
