"""Offline: ways to mix the n-gram lookup and the EAGLE-style head inside one K=3 draft, walked from the first
continuation position (tokens per verify step, what the stack measures), on the default model's greedy
continuations of MT-Bench first turns (or code prompts).

    served      lookup chain where the lookup matches, else the head's chain (eagle_ngram today)
    fill        as served, and a lookup chain shorter than K is continued by the head (fed the lookup's tokens)
    per_token   every draft token from a fresh lookup over the context plus the drafts so far, else the head's
    switch      the head's chain until a lookup over the context plus its drafts matches; that chain for the rest

The head's step-s draft fed true tokens equals its draft fed accepted drafts, so teacher-forced unrolled drafts
score every mix exactly.

    NUM_PROMPTS=80 python3 bench/experiments/eagle_ngram_mix_offline.py [code]
"""
import itertools

import torch
from eagle_offline_setup import load_setup, unrolled_drafts
from executor_svc.drafters.ngram import NgramDrafter

K = 3
code, count, head, trainer, seqs = load_setup()
ngram = NgramDrafter(2, 4)


def lookup(seq, j, step, n):
    """The lookup's up-to-n drafts after context position j plus ``step`` true tokens."""
    return ngram.lookup(seq.token_ids[: j + 2 + step], n)


def accepted(drafts, truth):
    count_ = 0
    for d, t in zip(drafts, truth):
        if d != t:
            break
        count_ += 1
    return count_


def mixes(seq, batch, j, head_drafts):
    truth = [int(batch.labels[j + i]) for i in range(1, K + 1)]
    chain = lookup(seq, j, 0, K)
    served = accepted(chain, truth) if chain else accepted(head_drafts, truth)
    if chain:
        m = accepted(chain, truth)
        fill = m if m < len(chain) or len(chain) == K else m + accepted(head_drafts[m:], truth[m:])
    else:
        fill = served
    per_token = 0
    for s in range(K):
        one = lookup(seq, j, s, 1)
        if (one[0] if one else head_drafts[s]) != truth[s]:
            break
        per_token += 1
    switch = 0
    for s in range(K):
        rest = lookup(seq, j, s, K - s)
        if rest:
            switch += accepted(rest, truth[s:])
            break
        if head_drafts[s] != truth[s]:
            break
        switch += 1
    return {"served": served, "fill": fill, "per_token": per_token, "switch": switch, "head": accepted(head_drafts, truth)}


rows = {}  # (seq index, position) -> mixes
for index, seq in enumerate(seqs):
    batch, outs, alive = unrolled_drafts(head, trainer, seq, K)
    drafts = torch.stack([head.draft_vocab[out.logits.argmax(-1)] for out in outs], dim=1)
    for j in torch.nonzero(alive).flatten().tolist():
        rows[(index, j)] = mixes(seq, batch, j, [int(d) for d in drafts[j]])


def walked(name):
    steps = tokens = 0
    for index, group in itertools.groupby(sorted(rows), key=lambda key: key[0]):
        positions = [j for _, j in group]
        j = positions[0]
        while (index, j) in rows:
            a = rows[(index, j)][name]
            steps += 1
            tokens += a + 1
            j += a + 1
    return tokens / steps


print(f"{'code' if code else 'MT-Bench'} {count} prompts, {len(rows)} positions, K={K}, walked tokens per step:")
for name in ("head", "served", "fill", "per_token", "switch"):
    print(f"  {name:10s} {walked(name):.3f}", flush=True)
