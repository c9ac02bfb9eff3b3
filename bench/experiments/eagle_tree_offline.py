"""Offline estimate of static draft trees for the shipped EAGLE-style head (EAGLE-2 style verification of several
candidates per depth), on the default model's greedy continuations of MT-Bench first turns (or code prompts).

A tree with branching (k1, k2, k3) keeps the head's top-k_d tokens as children of every depth-(d-1) node. Only the
branch that follows the target's own tokens can be accepted, and the head's step-d logits on that branch are exactly
the teacher-forced unrolled step d (its inputs: the step-(d-1) predicted feature and the true token), so depth d is
accepted when the target's token is among those logits' top k_d (and every shallower depth was). Positions where
the n-gram lookup matches draft its chain of 3 as eagle_ngram does today. Reports the walked acceptance length
(tokens per verify step) and the node count (verify rows = nodes + 1).

    NUM_PROMPTS=16 python3 bench/experiments/eagle_tree_offline.py [code]
"""
import torch
from eagle_offline_setup import load_setup, lookup_accepted, unrolled_drafts
from executor_svc.drafters.ngram import NgramDrafter

code, count, head, trainer, seqs = load_setup()
DEPTH, MAX_RANK = 3, 8
ngram = NgramDrafter(2, 4)
walks = []  # per sequence: {j: (rank of the truth at each depth (MAX_RANK if beyond), lookup accepted or None)}
for seq in seqs:
    batch, outs, alive = unrolled_drafts(head, trainer, seq, DEPTH)
    ranks = []
    for out in outs:
        top = head.draft_vocab[out.logits.topk(MAX_RANK, dim=-1).indices]  # [n, MAX_RANK] target ids
        hit = top == batch.labels[out.targets].unsqueeze(1)
        ranks.append(torch.where(hit.any(1), hit.float().argmax(1), torch.full_like(hit[:, 0], MAX_RANK, dtype=torch.int64)))
    entries = {}
    for j in torch.nonzero(alive).flatten().tolist():
        entries[j] = (tuple(int(r[j]) for r in ranks), lookup_accepted(ngram, seq, batch, j, DEPTH))
    walks.append(entries)

def walked(branching, use_lookup=True):
    tokens = steps = 0
    for entries in walks:
        j = min(entries)
        while j in entries:
            ranks, n_acc = entries[j]
            if use_lookup and n_acc is not None:
                a = n_acc
            else:
                a = 0
                for rank, k in zip(ranks, branching):
                    if rank >= k: break
                    a += 1
            tokens += a + 1; steps += 1; j += a + 1
    return tokens / steps

def nodes(branching):
    total, width = 0, 1
    for k in branching:
        width *= k; total += width
    return total

print(f"{'code' if code else 'MT-Bench'}, {count} prompts, {sum(len(w) for w in walks)} positions")
for branching in [(1, 1, 1), (2, 1, 1), (3, 1, 1), (4, 1, 1), (2, 2, 1), (3, 2, 1), (4, 2, 1), (3, 2, 2), (4, 2, 2),
                  (8, 1, 1), (8, 2, 1), (4, 4, 2), (8, 4, 2)]:
    print(f"  tree {branching}: {nodes(branching):3d} nodes  walked AL head only {walked(branching, False):.3f}"
          f"  with lookup chains {walked(branching):.3f}")
unmatched = [ranks[0] for w in walks for ranks, n_acc in w.values() if n_acc is None]
print(f"  first-draft coverage on the {len(unmatched)} positions without a lookup match: " + ", ".join(
    f"top-{k} {sum(r < k for r in unmatched) / len(unmatched):.3f}" for k in (1, 2, 3, 4, 8)))
