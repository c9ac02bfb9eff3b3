"""A/B: c=16, configs inflight:hidden:layers alternating per round."""
import argparse
import statistics
import sys

from client.bench.cli import _measure
from client.bench.small_model import make_small_checkpoint
from client.cache import stepahead_cache_dir
from client.model_resolver import resolve_model
from client.mtbench import load_mtbench_first_turns
from client.stack import LocalStack

rounds = int(sys.argv[1]); configs = [tuple(map(int, c.split(":"))) for c in sys.argv[2:]]
models = {}
for _, h, l in configs:
    models[(h, l)] = str(make_small_checkpoint(stepahead_cache_dir() / "models" / f"small-h{h}-l{l}", resolve_model(None), num_layers=l, hidden_size=h))
prompts = load_mtbench_first_turns()
args = argparse.Namespace(num_prompts=None, max_tokens=256)
res = {c: [] for c in configs}
for r in range(rounds):
    for c in configs:
        inflight, h, l = c
        with LocalStack(models[(h, l)], ["--num-threads", "1"], ["--max-inflight-steps", str(inflight)]) as stack:
            s = _measure(stack.address, prompts, 16, inflight, args)
        res[c].append((s["throughput_tok_s"], s["executor_step_ms_mean"], s["bubble_fraction"], 1000 * s["executor_bubble_s"] / s["steps"]))
        print(r, c, round(s["throughput_tok_s"]), round(s["executor_step_ms_mean"], 2), round(1000 * s["executor_bubble_s"] / s["steps"], 2), flush=True)
for c, v in res.items():
    print(c, "tput", [round(x[0]) for x in v], "median", round(statistics.median(x[0] for x in v)),
          "step", round(statistics.median(x[1] for x in v), 2), "bubble", round(statistics.median(x[2] for x in v), 3), "gap ms/step", round(statistics.median(x[3] for x in v), 2))
for c in configs:
    if c[0] == 2 and (1, c[1], c[2]) in res:
        rs = [a[0] / b[0] for a, b in zip(res[c], res[(1, c[1], c[2])])]
        print("async/sync", c[1:], [round(x, 2) for x in rs], "median", round(statistics.median(rs), 3))
