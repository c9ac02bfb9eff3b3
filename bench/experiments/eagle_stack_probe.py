import sys, time
from client import Client
from client.stack import LocalStack
from client.mtbench import load_mtbench_first_turns
model = "/root/.cache/stepahead/models/SmolLM2-135M-Instruct"
spec = sys.argv[1:]
stack = LocalStack(model, ["--num-threads", "2", *spec], ["--max-inflight-steps", "1"])
stack.start()
try:
    prompts = load_mtbench_first_turns(6)
    with Client(stack.address) as c:
        c.generate(messages=[{"role": "user", "content": "hi"}], max_tokens=8, temperature=0)
        base = c.model_info().stats
        t = time.time(); n = 0; per = None
        for p in prompts:
            r = c.generate(messages=[{"role": "user", "content": p}], max_tokens=128, temperature=0)
            n += len(r.token_ids)
            if r.spec:
                per = [a + b for a, b in zip(per or [0]*len(r.spec.accepted_per_position), r.spec.accepted_per_position)]
        dt = time.time() - t
        s = c.model_info().stats
    print(spec, f"tok/s {n/dt:.1f} steps {s.steps-base.steps} drafted {s.spec_drafted-base.spec_drafted} accepted {s.spec_accepted-base.spec_accepted} "
          f"draft_s {s.executor_draft_s-base.executor_draft_s:.2f} forward_s {s.executor_forward_s-base.executor_forward_s:.2f} tokens {n} per_pos {per}")
finally:
    stack.stop()
