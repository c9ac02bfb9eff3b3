"""Offline estimate: does the EAGLE head's own confidence tell when drafting 3 tokens pays over 1 (or 0)?

On the default model's greedy continuations of MT-Bench first turns, per verify step walked from the first
continuation position: n-gram lookup where it matches (K=3), else the head with K chosen from its top
probabilities (p1, and the product p1*p2*p3 along the true path; only the first matters when draft 1 is wrong).
Cost model: verify of q tokens V[q-1] decode steps (this machine: 1-2 tokens ~1.0, 3-4 tokens ~1.35-1.4) plus
c per head draft step.

    NUM_PROMPTS=16 python3 bench/experiments/eagle_confidence_gating.py [code]
"""
import torch
from eagle_offline_setup import load_setup, lookup_accepted, unrolled_drafts
from executor_svc.drafters.ngram import NgramDrafter

code, count, head, trainer, seqs = load_setup()
K = 3
ngram = NgramDrafter(2, 4)
walks = []  # per sequence: {j: (head_acc, lookup_acc or None, p1, p123)}
for seq in seqs:
    batch, outs, alive = unrolled_drafts(head, trainer, seq, K)
    acc = torch.zeros_like(alive, dtype=torch.int64); still = alive.clone()
    probs = []
    for out in outs:
        p = out.logits.softmax(-1)
        top, arg = p.max(-1)
        probs.append(top)
        still = still & (head.draft_vocab[arg] == batch.labels[out.targets]); acc += still.long()
    entries = {}
    for j in torch.nonzero(alive).flatten().tolist():
        p1 = float(probs[0][j]); p123 = p1 * float(probs[1][j]) * float(probs[2][j])
        entries[j] = (int(acc[j]), lookup_accepted(ngram, seq, batch, j, K), p1, p123)
    walks.append(entries)

V = {0: 1.0, 1: 1.0, 2: 1.37, 3: 1.35}
C = 0.07
def run(choose_k):
    time_ = tokens = steps = 0.0
    for entries in walks:
        j = min(entries)
        while j in entries:
            head_acc, n_acc, p1, p123 = entries[j]
            if n_acc is not None:
                k, a, drafted = 3, n_acc, 0
            else:
                k = choose_k(p1, p123); a = min(head_acc, k); drafted = k
            time_ += V[k] + C * drafted; tokens += a + 1; steps += 1; j += a + 1
    return tokens / steps, tokens / time_

print(f"{'code' if code else 'MT-Bench'}, {count} prompts; cost model V={V} c={C}")
for name, rule in [("head K=3", lambda p1, p: 3), ("head K=1", lambda p1, p: 1), ("head K=2", lambda p1, p: 2)]:
    al, sp = run(rule); print(f"  {name:28s} AL {al:.3f} predicted speed-up {sp:.3f}")
for t in (0.3, 0.4, 0.5, 0.6, 0.7, 0.8):
    al, sp = run(lambda p1, p, t=t: 3 if p1 > t else 1)
    print(f"  K=3 if p1>{t:.1f} else 1          AL {al:.3f} predicted speed-up {sp:.3f}")
for t in (0.1, 0.2, 0.3, 0.4, 0.5):
    al, sp = run(lambda p1, p, t=t: 3 if p > t else 1)
    print(f"  K=3 if p1p2p3>{t:.1f} else 1      AL {al:.3f} predicted speed-up {sp:.3f}")
for t0 in (0.05, 0.1, 0.2):
    al, sp = run(lambda p1, p, t0=t0: 0 if p1 < t0 else (3 if p > 0.3 else 1))
    print(f"  0 if p1<{t0} else K=3 if p123>0.3 else 1  AL {al:.3f} predicted speed-up {sp:.3f}")
# calibration of p1 against first-draft acceptance on non-matching positions
rows = [e for w in walks for e in w.values() if e[1] is None]
for lo, hi in ((0, .2), (.2, .4), (.4, .6), (.6, .8), (.8, 1.01)):
    sel = [r for r in rows if lo <= r[2] < hi]
    if sel:
        print(f"  p1 in [{lo:.1f},{hi:.1f}): {len(sel):4d} positions, accepted first draft {sum(r[0] >= 1 for r in sel)/len(sel):.2f}, mean accepted {sum(r[0] for r in sel)/len(sel):.2f}")
