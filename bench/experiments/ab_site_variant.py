"""A/B: small model c=16, configs inflight:value. The stack's processes start with SITE_DIR (a folder
of bench/experiments holding a sitecustomize.py) on their PYTHONPATH and ENV_VAR set to the value,
or to "" for value 0; the sitecustomize applies the variant. Prints throughput and executor step per
round, then medians and async/sync per value.

    ab_site_variant.py SITE_DIR ENV_VAR ROUNDS INFLIGHT:VALUE ...
"""
import argparse
import os
import statistics
import sys

from client.bench.cli import _measure
from client.bench.small_model import make_small_checkpoint
from client.cache import stepahead_cache_dir
from client.model_resolver import resolve_model
from client.mtbench import load_mtbench_first_turns
from client.stack import LocalStack

site_dir, env_var, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])
configs = [tuple(map(int, c.split(":"))) for c in sys.argv[4:]]
site = os.path.join(os.path.dirname(os.path.abspath(__file__)), site_dir)
model = str(make_small_checkpoint(stepahead_cache_dir() / "models" / "small-random-llama", resolve_model(None)))
prompts = load_mtbench_first_turns()
args = argparse.Namespace(num_prompts=None, max_tokens=256)
res = {c: [] for c in configs}
base_pythonpath = os.environ.get("PYTHONPATH", "")
for r in range(rounds):
    for inflight, value in configs:
        env = dict(os.environ, PYTHONPATH=site + os.pathsep + base_pythonpath, **{env_var: str(value) if value else ""})
        with LocalStack(model, ["--num-threads", "1"], ["--max-inflight-steps", str(inflight)], env=env) as stack:
            s = _measure(stack.address, prompts, 16, inflight, args)
        res[(inflight, value)].append((s["throughput_tok_s"], s["executor_step_ms_mean"], s["bubble_fraction"]))
        print(r, inflight, value, round(s["throughput_tok_s"]), round(s["executor_step_ms_mean"], 2), flush=True)
for c, v in res.items():
    print(c, "tput", [round(x[0]) for x in v], "median", round(statistics.median(x[0] for x in v)),
          "step", round(statistics.median(x[1] for x in v), 2), "bubble", round(statistics.median(x[2] for x in v), 3))
for a in configs:
    for b in configs:
        if a[1] == b[1] and a[0] == 2 and b[0] == 1:
            print("async/sync at", a[1], "per-round", [round(x[0] / y[0], 3) for x, y in zip(res[a], res[b])],
                  "median", round(statistics.median(x[0] / y[0] for x, y in zip(res[a], res[b])), 3))
