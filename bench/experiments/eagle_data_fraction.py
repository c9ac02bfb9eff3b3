"""Issue 20: how MT-Bench acceptance grows with the amount of self-distilled data. HeadTrainer (the package's training,
default settings, seed 0) on the first N training sequences of a train-drafter --keep-work .train dir (whose 1024 are
the shipped drafter's data), scored each epoch on its held-out set and on 16 greedy MT-Bench continuations (as in
eagle_checkpoint_acceptance.py).

Usage: python3 bench/experiments/eagle_data_fraction.py TRAIN_DIR N...
"""
import sys
import time
from pathlib import Path

import torch
from transformers import AutoTokenizer

from client.mtbench import load_mtbench_first_turns
from executor_svc.attention.selection import build_attention_backend
from executor_svc.drafter_training.dataset import draft_vocabulary, label_to_draft_map, load_sequences
from executor_svc.drafter_training.self_distill import SelfDistiller
from executor_svc.drafter_training.trainer import HeadTrainer, TrainSettings
from executor_svc.drafters.eagle_head import EagleHead
from executor_svc.model_loader import load_hf_config, load_model

MODEL = "/root/.cache/stepahead/models/SmolLM2-135M-Instruct"
NUM_TRAIN = 1024
torch.set_num_threads(2)
train_dir, sizes = Path(sys.argv[1]), [int(n) for n in sys.argv[2:]]
cfg = load_hf_config(MODEL)
dev = torch.device("cpu")
model = load_model(MODEL, torch.float32, dev, build_attention_backend("torch", dev))
seqs = [s for path in sorted(train_dir.glob("data-*.pt")) for s in load_sequences(path)]
all_train, held = seqs[:NUM_TRAIN], seqs[NUM_TRAIN:]
tok = AutoTokenizer.from_pretrained(MODEL)
prompts = [list(tok.apply_chat_template([{"role": "user", "content": p}], add_generation_prompt=True, tokenize=True,
                                        return_dict=False)) for p in load_mtbench_first_turns(16)]
mtbench = SelfDistiller(model, dev, [2], 128, 0.7, 4096).generate(prompts, [True] * 16, torch.Generator().manual_seed(0))
for size in sizes:
    train = all_train[:size]
    print(f"N={size}: {sum(len(s.token_ids) - s.prompt_len for s in train)} continuation tokens", flush=True)
    vocab, _ = draft_vocabulary(train, 4096, cfg.vocab_size)
    torch.manual_seed(0)
    head = EagleHead(cfg, 4096)
    head.draft_vocab.copy_(vocab)
    head.initialise(0)
    settings = TrainSettings()
    trainer = HeadTrainer(head, model, label_to_draft_map(vocab, cfg.vocab_size), settings, 0)
    began = time.monotonic()
    while trainer.state.epoch < settings.epochs:
        trainer.train_epoch(train, None)
        print(f"N={size} epoch {trainer.state.epoch}: held-out {trainer.held_out_acceptance(held).describe()}; "
              f"MT-Bench {trainer.held_out_acceptance(mtbench).describe()}; {time.monotonic() - began:.0f} s",
              flush=True)
