"""A/B: the default model's bare forward (decode of 1 and 16 rows over 200-token contexts, fp32, 2 threads) at
two checkouts, alternating rounds, each in a fresh process; prints per-round and median ms per forward.

    python3 bench/experiments/model_forward_ab.py ROUNDS OLD_CHECKOUT NEW_CHECKOUT
"""
import json
import os
import statistics
import subprocess
import sys

CHILD = r"""
import json, statistics, sys, time, torch
torch.set_num_threads(2)
from client.model_resolver import resolve_model
from executor_svc.attention.torch_backend import TorchAttentionBackend
from executor_svc.host_batch import HostBatch
from executor_svc.kv_cache import PagedKVCache
from executor_svc.model_loader import load_model

model = load_model(resolve_model(None), torch.float32, "cpu", TorchAttentionBackend())
c = model.config
cache = PagedKVCache(c.num_hidden_layers, 16 * 14, 16, c.num_key_value_heads, c.hidden_size // c.num_attention_heads,
                     torch.float32, "cpu")
out = {}
for rows in (1, 16):
    batch = HostBatch(16)
    for r in range(rows):
        batch.add_sequence([7], 200, list(range(r * 14, (r + 1) * 14)))
    ids, positions, meta = batch.to_device(torch.device("cpu"))
    times = []
    with torch.inference_mode():
        for i in range(60):
            meta.backend_cache.clear()
            start = time.perf_counter()
            model.compute_logits(model(ids, positions, meta, cache))
            if i >= 10:
                times.append(time.perf_counter() - start)
    out[rows] = 1000 * statistics.median(times)
print(json.dumps(out))
"""


def run(checkout: str) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": f"{checkout}:{checkout}/proto"}
    done = subprocess.run([sys.executable, "-c", CHILD], cwd=checkout, capture_output=True, text=True, check=True,
                          env=env)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    rounds, old, new = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    results: dict[str, list[dict[str, float]]] = {"old": [], "new": []}
    for r in range(rounds):
        order = [("old", old), ("new", new)] if r % 2 == 0 else [("new", new), ("old", old)]
        for name, checkout in order:
            results[name].append(run(checkout))
            print(r, name, results[name][-1], flush=True)
    for rows in ("1", "16"):
        o = statistics.median(x[rows] for x in results["old"])
        n = statistics.median(x[rows] for x in results["new"])
        print(f"rows {rows}: old {o:.2f} ms, new {n:.2f} ms, new/old {n / o:.3f}")


if __name__ == "__main__":
    main()
