"""Offline acceptance at K=3 of the shipped EAGLE-style head, the n-gram lookup and eagle_ngram (lookup where it
matches, head elsewhere) on the default model's greedy continuations of MT-Bench first turns (or code prompts).

"every position": the mean accepted drafts over all continuation positions; "walked": tokens per step when
verifying from the first continuation position on (what the stack measures). "predicted speed-up": walked,
with a verify of q tokens costing V[q-1] decode steps and c per head draft step (the figures of the earlier
stack runs), per source K (eagle K / lookup K).

    NUM_PROMPTS=16 python3 bench/experiments/eagle_ngram_offline.py [code]
"""
import itertools
import torch
from eagle_offline_setup import load_setup, lookup_accepted, unrolled_drafts
from executor_svc.drafters.ngram import NgramDrafter

code, count, head, trainer, seqs = load_setup()
K = 3
rows = []  # (eagle_acc, ngram_acc or None)
for min_n in (2, 3):
  ngram = NgramDrafter(min_n, 4)
  rows = []
  for seq in seqs:
    batch, outs, alive = unrolled_drafts(head, trainer, seq, K)
    acc = torch.zeros_like(alive, dtype=torch.int64); still = alive.clone()
    for out in outs:
        drafts = head.draft_vocab[out.logits.argmax(-1)]
        still = still & (drafts == batch.labels[out.targets]); acc += still.long()
    for j in torch.nonzero(alive).flatten().tolist():
        rows.append((int(acc[j]), lookup_accepted(ngram, seq, batch, j, K), j, id(seq)))
  def walked(choose):
    steps = tokens = 0
    # rows are per sequence in order; walk each sequence's alive entries
    for key, group in itertools.groupby(enumerate(rows), key=lambda x: x[1][3]):
        entries = {r[2]: r for _, r in group}
        j = min(entries)
        while j in entries:
            a = choose(entries[j]); steps += 1; tokens += a + 1; j += a + 1
    return tokens / steps
  def speed(eagle_k, ngram_k=3, c=0.06, V={0:1.0,1:1.03,2:1.055,3:1.08}):
    time_ = tokens = 0.0
    for key, group in itertools.groupby(enumerate(rows), key=lambda x: x[1][3]):
        entries = {r[2]: r for _, r in group}
        j = min(entries)
        while j in entries:
            r = entries[j]
            if r[1] is not None and ngram_k:
                a = min(r[1], ngram_k); cost = V[ngram_k]
            elif eagle_k:
                a = min(r[0], eagle_k); cost = V[eagle_k] + eagle_k * c
            else:
                a = 0; cost = 1.0
            time_ += cost; tokens += a + 1; j += a + 1
    return tokens / time_
  print("  same K both:", " ".join(f"K{k} {speed(k, k):.2f}" for k in (1, 2, 3)))
  print("  predicted speed-up: eagle K3 %.2f K1 %.2f | ngram only K3 %.2f | hybrid K3/K3 %.2f K3/K1 %.2f K3/K2 %.2f" % (
      speed(3, 0), speed(1, 0), speed(0, 3), speed(3, 3), speed(1, 3), speed(2, 3)))
  n = len(rows); matched = [r for r in rows if r[1] is not None]
  eagle = 1 + sum(r[0] for r in rows) / n
  ng = 1 + sum(r[1] for r in matched) / n
  hyb = 1 + sum(r[1] if r[1] is not None else r[0] for r in rows) / n
  best = 1 + sum(max(r[0], r[1] or 0) for r in rows) / n
  print(f"{'code' if code else 'MT-Bench'} min_n={min_n}: {n} positions; n-gram match {len(matched)/n:.1%}; "
        f"on matches n-gram acc {sum(r[1] for r in matched)/max(1,len(matched)):.2f} vs EAGLE {sum(r[0] for r in matched)/max(1,len(matched)):.2f}; "
        f"walked AL eagle {walked(lambda r: r[0]):.3f} ngram {walked(lambda r: r[1] or 0):.3f} hybrid {walked(lambda r: r[1] if r[1] is not None else r[0]):.3f}; "
        f"AL eagle {eagle:.3f}, ngram {ng:.3f}, hybrid {hyb:.3f}, oracle {best:.3f}", flush=True)
