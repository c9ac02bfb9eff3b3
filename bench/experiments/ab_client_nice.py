"""A/B: small model c=16; configs inflight:client_nice. The load generator runs in a spawned child
process at the given nice value (the stack's processes are untouched)."""
import argparse
import multiprocessing as mp
import os
import statistics
import sys

from client.bench.small_model import make_small_checkpoint
from client.cache import stepahead_cache_dir
from client.model_resolver import resolve_model
from client.mtbench import load_mtbench_first_turns
from client.stack import LocalStack


def child(address, prompts, inflight, nice, q):
    if nice:
        os.nice(nice)
    from client.bench.cli import _measure
    args = argparse.Namespace(num_prompts=None, max_tokens=256)
    q.put(_measure(address, prompts, 16, inflight, args))


if __name__ == "__main__":
    rounds = int(sys.argv[1]); configs = [tuple(map(int, c.split(":"))) for c in sys.argv[2:]]
    model = str(make_small_checkpoint(stepahead_cache_dir() / "models" / "small-random-llama", resolve_model(None)))
    prompts = load_mtbench_first_turns()
    ctx = mp.get_context("spawn")
    res = {c: [] for c in configs}
    for r in range(rounds):
        for inflight, nice in configs:
            with LocalStack(model, ["--num-threads", "1"], ["--max-inflight-steps", str(inflight)]) as stack:
                q = ctx.Queue()
                p = ctx.Process(target=child, args=(stack.address, prompts, inflight, nice, q))
                p.start(); s = q.get(); p.join()
            res[(inflight, nice)].append((s["throughput_tok_s"], s["executor_step_ms_mean"], s["bubble_fraction"], s["itl_ms_p50"]))
            print(r, inflight, nice, round(s["throughput_tok_s"]), round(s["executor_step_ms_mean"], 2), flush=True)
    for c, v in res.items():
        print(c, "tput", [round(x[0]) for x in v], "median", round(statistics.median(x[0] for x in v)),
              "step", round(statistics.median(x[1] for x in v), 2), "bubble", round(statistics.median(x[2] for x in v), 3),
              "itl", round(statistics.median(x[3] for x in v), 2))
    def ratio(a, b):
        rs = [x[0] / y[0] for x, y in zip(res[a], res[b])]
        return [round(v, 2) for v in rs], round(statistics.median(rs), 3)
    print("async/sync nice0", ratio((2, 0), (1, 0)))
    print("async/sync nice10", ratio((2, 10), (1, 10)))
