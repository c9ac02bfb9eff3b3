"""Acceptance length at K=3 of EAGLE-style head checkpoints (train-drafter's .train/checkpoint.pt copies) or
finished drafter dirs, all on the same greedy target continuations of MT-Bench first turns (or code prompts).

Usage: NUM_PROMPTS=16 python3 bench/experiments/eagle_checkpoint_acceptance.py [code] PATH...
"""
import os
import sys
from pathlib import Path

import torch
from transformers import AutoTokenizer

from client.mtbench import load_mtbench_first_turns
from executor_svc.attention.selection import build_attention_backend
from executor_svc.drafter_training.dataset import label_to_draft_map
from executor_svc.drafter_training.self_distill import SelfDistiller
from executor_svc.drafter_training.trainer import HeadTrainer, TrainSettings
from executor_svc.drafters.eagle_head import EagleHead, load_head
from executor_svc.model_loader import load_hf_config, load_model
from stepahead_common.stdlib_prompts import code_prompts

MODEL = "/root/.cache/stepahead/models/SmolLM2-135M-Instruct"
torch.set_num_threads(2)
count = int(os.environ.get("NUM_PROMPTS", "8"))
code = "code" in sys.argv[1:]
paths = [a for a in sys.argv[1:] if a != "code"]
cfg = load_hf_config(MODEL)
dev = torch.device("cpu")
model = load_model(MODEL, torch.float32, dev, build_attention_backend("torch", dev))
tok = AutoTokenizer.from_pretrained(MODEL)
texts = code_prompts(count) if code else load_mtbench_first_turns(count)
prompts = [list(tok.apply_chat_template([{"role": "user", "content": p}], add_generation_prompt=True,
                                        tokenize=True, return_dict=False)) for p in texts]
seqs = SelfDistiller(model, dev, [2], 128, 0.7, 4096).generate(prompts, [True] * len(prompts),
                                                                 torch.Generator().manual_seed(0))
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
