"""Acceptance length at K=3 per MT-Bench category, through the stack: default model, eagle_ngram (the shipped
head, or EAGLE_DIR's), greedy, 128 tokens, every first turn once, one at a time. The benchmark's c=1 runs used
the set's first 8 or 16 prompts until 2026-11-27, which are all writing and roleplay.

    python3 bench/experiments/eagle_al_by_category.py [K]
"""
import json
import os
import sys
from collections import defaultdict

from client import Client
from client.model_resolver import resolve_model
from client.mtbench import ensure_mtbench_questions
from client.stack import LocalStack

k = sys.argv[1] if len(sys.argv) > 1 else "3"
executor = ["--num-threads", "2", "--spec-method", "eagle_ngram", "--num-spec-tokens", k]
if os.environ.get("EAGLE_DIR"):
    executor += ["--eagle-drafter", os.environ["EAGLE_DIR"]]
questions = [json.loads(line) for line in open(ensure_mtbench_questions()) if line.strip()]
totals = defaultdict(lambda: [0, 0, 0])  # category -> [accepted, verify steps, tokens]
with LocalStack(str(resolve_model(None)), executor, ["--max-inflight-steps", "2", "--num-spec-tokens", k]) as stack:
    with Client(stack.address) as client:
        for question in questions:
            result = client.generate(messages=[{"role": "user", "content": question["turns"][0]}], max_tokens=128,
                                     temperature=0.0)
            entry = totals[question["category"]]
            entry[0] += result.spec.accepted
            entry[1] += result.spec.verify_steps
            entry[2] += len(result.token_ids)
print(f"K={k}: category  tokens  verify steps  acceptance length (accepted drafts / verify steps + 1)")
for category, (accepted, steps, tokens) in list(totals.items()) + [("all", [sum(v[i] for v in totals.values())
                                                                            for i in range(3)])]:
    print(f"{category:>12} {tokens:7d} {steps:7d}   {1 + accepted / steps:.3f}")
