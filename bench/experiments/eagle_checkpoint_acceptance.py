"""Acceptance length at K=3 of EAGLE-style head checkpoints (train-drafter's .train/checkpoint.pt copies) or
finished drafter dirs, all on the same greedy target continuations of MT-Bench first turns (or code prompts).

Usage: NUM_PROMPTS=16 python3 bench/experiments/eagle_checkpoint_acceptance.py [code] PATH...
"""
import sys
from pathlib import Path

import torch

from eagle_offline_setup import load_continuations
from executor_svc.drafter_training.dataset import label_to_draft_map
from executor_svc.drafter_training.trainer import HeadTrainer, TrainSettings
from executor_svc.drafters.eagle_head import EagleHead, load_head

code, count, cfg, model, seqs = load_continuations(default_count=8)
dev = torch.device("cpu")
paths = [a for a in sys.argv[1:] if a != "code"]
print(f"{'code' if code else 'MT-Bench'}: {len(seqs)} prompts, {sum(len(s.token_ids) - s.prompt_len for s in seqs)} "
      "continuation tokens")
for path in paths:
    if path.endswith(".pt"):
        state = torch.load(path, weights_only=True)["head"]
        head = EagleHead(cfg, state["draft_vocab"].numel())
        head.load_state_dict(state)
    else:
        head, _ = load_head(path, cfg, None, torch.float32, dev)
    trainer = HeadTrainer(head, model, label_to_draft_map(head.draft_vocab, cfg.vocab_size), TrainSettings(), 0)
    print(Path(path).name, trainer.held_out_acceptance(seqs).describe(), flush=True)
