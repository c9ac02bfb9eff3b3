"""A/B: small model c=16, configs inflight:variant alternating per round; variant 1 sets the environment
variable named by the first argument (EXP_DONEQ or EXP_AIOT) to 1 for the stack of a checkout with the
matching patch applied. Prints throughput and executor step."""
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

variant_env = sys.argv[1]; rounds = int(sys.argv[2]); configs = [tuple(map(int, c.split(":"))) for c in sys.argv[3:]]
model = str(make_small_checkpoint(stepahead_cache_dir() / "models" / "small-random-llama", resolve_model(None)))
prompts = load_mtbench_first_turns()
args = argparse.Namespace(num_prompts=None, max_tokens=256)
res = {c: [] for c in configs}
for r in range(rounds):
    for inflight, variant in configs:
        os.environ[variant_env] = "1" if variant else ""
        with LocalStack(model, ["--num-threads", "1"], ["--max-inflight-steps", str(inflight)]) as stack:
            s = _measure(stack.address, prompts, 16, inflight, args)
        res[(inflight, variant)].append((s["throughput_tok_s"], s["executor_step_ms_mean"], s["bubble_fraction"]))
for c, v in res.items():
    print(c, "tput", [round(x[0]) for x in v], "median", round(statistics.median(x[0] for x in v)),
          "step", round(statistics.median(x[1] for x in v), 2), "bubble", round(statistics.median(x[2] for x in v), 3))
base = res[configs[0]]
for c in configs[1:]:
    print(c, "/", configs[0], "per-round", [round(a[0] / b[0], 3) for a, b in zip(res[c], base)],
          "median", round(statistics.median(a[0] / b[0] for a, b in zip(res[c], base)), 3))
