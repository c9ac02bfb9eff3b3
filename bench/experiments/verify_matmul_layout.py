"""Bare forward of the default model (2 threads, fp32, CPU) at 1, 3 and 4 tokens per step under several matmul
layouts for 3-4 rows (executor_svc/models/layers.py's weight_stationary_rows patched), 3 rounds, medians.

    python3 bench/experiments/verify_matmul_layout.py
"""
import torch, statistics, sys
import executor_svc.models.layers as L
from client.bench.baselines import _BareForward
from executor_svc.attention.selection import build_attention_backend
from executor_svc.model_loader import load_model
torch.set_num_threads(2)
dev=torch.device('cpu')
model=load_model('/root/.cache/stepahead/models/SmolLM2-135M-Instruct', torch.float32, dev, build_attention_backend('auto', dev))
orig=L.weight_stationary_rows
variants={
 'current': orig,
 'n4-linear': lambda n: None if n in (3,4) else orig(n),
 'n4-pad5': lambda n: 5 if n in (3,4) else orig(n),
 'n4-pad6': lambda n: 6 if n in (3,4) else orig(n),
 'n4-exact3': lambda n: 3 if n==3 else orig(n),
}
res={}
for rnd in range(3):
  for name,f in variants.items():
    L.weight_stationary_rows=f
    for q in (1,4,3):
        b=_BareForward(model,[100],200,q,False)
        t=b.time_steps(25)[5:]
        res.setdefault((name,q),[]).append(statistics.median(t)*1000)
for name in variants:
    a=statistics.median(res[(name,1)]); b=statistics.median(res[(name,4)])
    c=statistics.median(res[(name,3)])
    print(f"{name}: q1 {a:.1f} ms q3 {c:.1f} q4 {b:.1f} ms V(3) {b/a:.2f}")
