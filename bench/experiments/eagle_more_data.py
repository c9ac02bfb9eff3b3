"""Issue 20: a head on twice the self-distilled data, reusing a finished train-drafter --keep-work run.

The base run's data (its 4,096 training sequences and its held-out set) stay as they are; EXTRA new prompts are drawn
by training_requests with another seed, skipping every prompt the base run used (and the base's held-out ones), the
kinds other than word problems first (the leftovers of the chat, passage and stdlib pools), and
self-distilled as train-drafter does (every third sampled at 0.7, the rest greedy; each chunk seeded by its index).
Then a head is trained from scratch on base + new (the package's HeadTrainer, default settings but EPOCHS), scored on
the base held-out set each epoch, and saved with save_head.

Usage: python3 bench/experiments/eagle_more_data.py BASE_OUT WORK OUT [EXTRA=4096] [EPOCHS=2]
  BASE_OUT: a train-drafter --out dir with its .train kept; WORK: where the new chunks go (resumable); OUT: the head.
"""
import json
import sys
import time
from dataclasses import asdict, replace
from pathlib import Path

import torch

from executor_svc.attention.selection import build_attention_backend
from executor_svc.drafter_training.dataset import draft_vocabulary, label_to_draft_map, load_sequences
from executor_svc.drafter_training.prompts import chat_requests, passage_requests, stdlib_requests, training_requests
from executor_svc.drafter_training.run import (DataSettings, TrainDrafterJob, _prompt_ids, chat_prompt_ids,
                                              self_distill_chunks)
from executor_svc.drafter_training.self_distill import SelfDistiller
from executor_svc.drafter_training.trainer import HeadTrainer, TrainSettings
from executor_svc.drafters.eagle_head import EagleHead, EagleHeadConfig, save_head
from executor_svc.drafters.shipped import target_probe
from executor_svc.model_loader import load_hf_config, load_model
from executor_svc.server import eos_token_ids

NEW_SEED = 1
torch.set_num_threads(2)
base_out, work, out = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
extra = int(sys.argv[4]) if len(sys.argv) > 4 else 4096
epochs = int(sys.argv[5]) if len(sys.argv) > 5 else 2
saved = json.loads((base_out / ".train" / "job.json").read_text())
data = DataSettings(**saved["data"])
base_job = TrainDrafterJob(saved["model_dir"], str(base_out), seed=saved["seed"], data=data)
model_dir = saved["model_dir"]


def unused_first(texts: list[str]) -> list[str]:
    """The requests of every kind but math first (their pools are what the base run did not use up), then the
    word problems, whose pool has no end: without this, a large draw is mostly word problems once the other
    kinds' leftovers are few."""
    finite = set(chat_requests()) | set(passage_requests()) | set(stdlib_requests())
    return [t for t in texts if t in finite] + [t for t in texts if t not in finite]


def new_prompt_ids() -> list[list[int]]:
    """EXTRA chat-formatted prompts the base run did not use (training or held-out), seeded by NEW_SEED."""
    from transformers import AutoTokenizer

    used = {tuple(ids) for ids in _prompt_ids(base_job)}
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    ids: list[list[int]] = []
    for text in unused_first(training_requests(4 * (extra + data.num_prompts), NEW_SEED)):
        tokens = chat_prompt_ids(tokenizer, text)
        if 0 < len(tokens) <= data.max_prompt_tokens and tuple(tokens) not in used:
            used.add(tuple(tokens))
            ids.append(tokens)
        if len(ids) == extra:
            return ids
    print(f"only {len(ids)} new prompts found", flush=True)
    return ids


cfg = load_hf_config(model_dir)
dev = torch.device("cpu")
model = load_model(model_dir, torch.float32, dev, build_attention_backend("torch", dev))
began = time.monotonic()
work.mkdir(parents=True, exist_ok=True)
prompts = new_prompt_ids()
distiller = SelfDistiller(model, dev, eos_token_ids(model_dir, cfg), data.max_new_tokens, data.temperature,
                          max_batch_tokens=4096)
# num_prompts = len(prompts): every third of them sampled, none held out (the base's held-out set is kept).
new = self_distill_chunks(distiller, prompts, replace(data, num_prompts=len(prompts)), NEW_SEED, work, None)
print(f"self-distilled {len(new)} new sequences, {sum(len(s.token_ids) - s.prompt_len for s in new)} continuation "
      f"tokens, {time.monotonic() - began:.0f} s", flush=True)

base = [s for path in sorted((base_out / ".train").glob("data-*.pt")) for s in load_sequences(path)]
train, held_out = base[: data.num_prompts] + new, base[data.num_prompts:]
vocab, coverage = draft_vocabulary(train, data.draft_vocab_size, cfg.vocab_size)
torch.manual_seed(0)
head = EagleHead(cfg, data.draft_vocab_size)
head.draft_vocab.copy_(vocab)
head.initialise(0)
settings = TrainSettings(epochs=epochs)
trainer = HeadTrainer(head, model, label_to_draft_map(vocab, cfg.vocab_size), settings, 0)
trained = time.monotonic()
while trainer.state.epoch < settings.epochs:
    trainer.train_epoch(train, None)
    acceptance = trainer.held_out_acceptance(held_out)
    trainer.state.history[-1]["held_out"] = asdict(acceptance)
    print(f"epoch {trainer.state.epoch}: held-out {acceptance.describe()}; {time.monotonic() - trained:.0f} s",
          flush=True)
for param in head.parameters():
    param.requires_grad_(False)
summary = {
    "data": {**asdict(data), "num_prompts": len(train), "base_prompts": data.num_prompts, "new_prompts": len(new),
             "new_prompts_seed": NEW_SEED, "train_sequences": len(train), "held_out_sequences": len(held_out),
             "continuation_tokens": sum(len(s.token_ids) - s.prompt_len for s in train),
             "draft_vocab_coverage": round(coverage, 4)},
    "train": asdict(settings), "history": trainer.state.history, "device": "cpu", "threads": 2,
    "recipe": "bench/experiments/eagle_more_data.py",
}
save_head(head, EagleHeadConfig.for_target(cfg, data.draft_vocab_size, 0, target_probe(model), summary), out)
print(f"wrote {out}; {time.monotonic() - began:.0f} s in all", flush=True)
