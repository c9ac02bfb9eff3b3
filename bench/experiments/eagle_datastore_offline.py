"""Offline: would drafts looked up in the model's own earlier outputs (a datastore of other requests'
continuations, as retrieval / suffix-tree speculation does) beat the shipped head where the prompt lookup finds no
match? Greedy continuations (128 tokens) of the first NUM_PROMPTS MT-Bench first turns; each of the first EVAL
is scored against a datastore of the others' continuations (leave-one-out: a server that served them before).

At every position without a prompt-lookup match (where `eagle_ngram` asks the head), the datastore draft is the most
frequent K-token continuation of the longest context suffix (4, 3 or 2 tokens) found in the datastore. Printed:
how often it matches, accepted drafts of the datastore and of the head there, and the walked acceptance length at
K=3 of eagle_ngram (lookup, else head) against a three-way (lookup, else datastore with a suffix of MIN_N or more
tokens, else head).

    NUM_PROMPTS=80 EVAL=16 MIN_N=3 python3 bench/experiments/eagle_datastore_offline.py
"""
import collections
import os

import torch
from eagle_offline_setup import accepted_prefix, load_setup, lookup_accepted, unrolled_drafts

from executor_svc.drafters.ngram import NgramDrafter

K = 3
EVAL = int(os.environ.get("EVAL", "16"))
MIN_N = int(os.environ.get("MIN_N", "3"))
code, count, head, trainer, seqs = load_setup()


def build_index(outputs: list[list[int]]) -> dict[tuple[int, ...], collections.Counter]:
    """Every 2-4 token n-gram of the outputs -> how often each K-token continuation followed it."""
    index: dict[tuple[int, ...], collections.Counter] = collections.defaultdict(collections.Counter)
    for tokens in outputs:
        for n in (2, 3, 4):
            for start in range(len(tokens) - n - K + 1):
                index[tuple(tokens[start : start + n])][tuple(tokens[start + n : start + n + K])] += 1
    return index


def datastore_draft(index, context: list[int]) -> tuple[list[int], int] | None:
    for n in (4, 3, 2):
        counts = index.get(tuple(context[-n:]))
        if counts:
            return list(counts.most_common(1)[0][0]), n
    return None


outputs = [seq.token_ids[seq.prompt_len :] for seq in seqs]
ngram = NgramDrafter(2, 4)
rows = []  # per evaluated position: (head accepted, lookup accepted or None, datastore accepted or None, n)
walk_inputs = []
for i, seq in enumerate(seqs[:EVAL]):
    index = build_index(outputs[:i] + outputs[i + 1 :])
    batch, outs, alive = unrolled_drafts(head, trainer, seq, K)
    acc = torch.zeros_like(alive, dtype=torch.int64)
    still = alive.clone()
    for out in outs:
        drafts = head.draft_vocab[out.logits.argmax(-1)]
        still = still & (drafts == batch.labels[out.targets])
        acc += still.long()
    entries = {}
    for j in torch.nonzero(alive).flatten().tolist():
        truth = [int(batch.labels[j + step]) for step in range(1, K + 1)]
        found = datastore_draft(index, seq.token_ids[: j + 2])
        ds = (accepted_prefix(found[0], truth), found[1]) if found else (None, 0)
        row = (int(acc[j]), lookup_accepted(ngram, seq, batch, j, K), ds[0], ds[1])
        rows.append(row)
        entries[j] = row
    walk_inputs.append(entries)


def walked(choose) -> float:
    steps = tokens = 0
    for entries in walk_inputs:
        j = min(entries)
        while j in entries:
            a = choose(entries[j])
            steps += 1
            tokens += a + 1
            j += a + 1
    return tokens / steps


unmatched = [r for r in rows if r[1] is None]
with_ds = [r for r in unmatched if r[2] is not None and r[3] >= MIN_N]
print(f"{len(rows)} positions of {EVAL} prompts (datastore: {count - 1} other continuations); no prompt-lookup match "
      f"at {len(unmatched) / len(rows):.1%}; of those, a datastore match of >= {MIN_N} tokens at "
      f"{len(with_ds) / max(1, len(unmatched)):.1%}")
if with_ds:
    print(f"  there: datastore accepted {sum(r[2] for r in with_ds) / len(with_ds):.2f} of {K}, head "
          f"{sum(r[0] for r in with_ds) / len(with_ds):.2f}; datastore first draft right "
          f"{sum(r[2] > 0 for r in with_ds) / len(with_ds):.1%}, head {sum(r[0] > 0 for r in with_ds) / len(with_ds):.1%}")
for n in (2, 3, 4):
    group = [r for r in unmatched if r[2] is not None and r[3] == n]
    if group:
        print(f"  suffix of {n}: {len(group)} positions, datastore {sum(r[2] for r in group) / len(group):.2f}, "
              f"head {sum(r[0] for r in group) / len(group):.2f}")
print(f"walked AL at K={K}: eagle_ngram {walked(lambda r: r[1] if r[1] is not None else r[0]):.3f}; "
      f"three-way {walked(lambda r: r[1] if r[1] is not None else (r[2] if r[2] is not None and r[3] >= MIN_N else r[0])):.3f}; "
      f"oracle of the three {walked(lambda r: max(r[0], r[1] or 0, r[2] or 0)):.3f}")
