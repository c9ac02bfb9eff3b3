"""The n-gram lookup per request and step, no match, one token appended per step (median of 200 steps): the Python
scan it replaced against `NgramDrafter.propose` (bytearray.rfind over the request's kept encoding).

    python3 bench/experiments/ngram_lookup_speed.py
"""
import random
import time
from types import SimpleNamespace

from executor_svc.drafters.base import DraftRequest
from executor_svc.drafters.ngram import NgramDrafter


def scan(tokens, num_tokens, min_n=2, max_n=4):
    """The replaced implementation: a Python scan, longest suffix first, latest match first."""
    length = len(tokens)
    for n in range(min(max_n, length - 1), min_n - 1, -1):
        suffix = tokens[length - n :]
        first = suffix[0]
        for start in range(length - n - 1, -1, -1):
            if tokens[start] == first and tokens[start : start + n] == suffix:
                return tokens[start + n : start + n + num_tokens]
    return []


rng = random.Random(0)
for length in (200, 1000, 4000, 8000):
    tokens = [rng.randrange(49152) for _ in range(length)]
    drafter = NgramDrafter(2, 4)
    scanned, kept = [], []
    for _ in range(200):
        tokens.append(rng.randrange(49152))
        state = SimpleNamespace(request_id="r", token_ids=tokens)
        t = time.perf_counter()
        scan(tokens, 3)
        scanned.append(time.perf_counter() - t)
        t = time.perf_counter()
        drafter.propose([DraftRequest(state, 3)])
        kept.append(time.perf_counter() - t)
    scanned.sort()
    kept.sort()
    print(f"{length:5d} tokens: Python scan {scanned[100] * 1e3:.3f} ms, rfind on the kept encoding "
          f"{kept[100] * 1e3:.4f} ms ({scanned[100] / kept[100]:.0f}x)")
