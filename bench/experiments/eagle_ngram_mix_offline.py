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

FULL_VOCAB=1 drafts over the target's whole vocabulary instead of the head's draft vocabulary (the head's weights
are vocabulary-free: it predicts a feature that the target's LM-head rows score), and prints how many of the
continuation's tokens the draft vocabulary holds.
"""
import os
import itertools

import torch
from eagle_offline_setup import accepted_prefix as accepted
from eagle_offline_setup import load_setup, unrolled_drafts
from executor_svc.drafters.ngram import NgramDrafter

K = 3
code, count, head, trainer, seqs, model = load_setup(with_model=True)
ngram = NgramDrafter(2, 4)
shipped_vocab = set(head.draft_vocab.tolist())
if os.environ.get("FULL_VOCAB"):
    full = torch.arange(trainer.embed.shape[0], dtype=torch.int64)
    head.draft_vocab = full
    trainer.lm_rows = model.lm_head_weight.detach().float()


def lookup(seq, j, step, n):
    """The lookup's up-to-n drafts after context position j plus ``step`` true tokens."""
    return ngram.lookup(seq.token_ids[: j + 2 + step], n)


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


continuation = [t for seq in seqs for t in seq.token_ids[seq.prompt_len:]]
in_vocab = sum(t in shipped_vocab for t in continuation)
print(f"FULL_VOCAB={os.environ.get('FULL_VOCAB', '')}; continuation tokens in the shipped draft vocabulary: "
      f"{in_vocab} of {len(continuation)} ({in_vocab / len(continuation):.1%})")
print(f"{'code' if code else 'MT-Bench'} {count} prompts, {len(rows)} positions, K={K}, walked tokens per step:")
for name in ("head", "served", "fill", "per_token", "switch"):
    print(f"  {name:10s} {walked(name):.3f}", flush=True)
