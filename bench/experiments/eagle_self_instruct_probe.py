"""Issue 20, a probe of the one data lever not tried: prompts the target writes itself (self-instruct) against the
template prompts, at equal size, as fine-tuning data for the shipped head.

1. The target writes N user questions: a chat request "Write one question ... about <area>, on <topic>" per prompt
   (eight broad areas of assistant use in this script's own words, crossed with the templates' topic list),
   sampled at 0.7, 48 tokens; the reply's first line is the question.
2. Both prompt sets (the N questions; N fresh template requests, seed 2) are self-distilled as train-drafter does
   (128 tokens, every third sampled at 0.7).
3. A copy of the shipped head is fine-tuned on each for EPOCHS at a tenth of the default learning rate.
4. The shipped head and both fine-tuned ones are scored on the default model's greedy continuations of all 80
   MT-Bench first turns (the head alone, K=3, walked from the first position, as eagle_ngram_mix_offline.py).

    python3 bench/experiments/eagle_self_instruct_probe.py [N=384] [EPOCHS=1]
"""
import copy
import random
import sys
import time

import torch
from eagle_offline_setup import accepted_prefix, load_setup, unrolled_drafts
from transformers import AutoTokenizer

from executor_svc.drafter_training.dataset import label_to_draft_map
from executor_svc.drafter_training.prompt_material import TOPICS
from executor_svc.drafter_training.prompts import training_requests
from executor_svc.drafter_training.run import chat_prompt_ids
from executor_svc.drafter_training.self_distill import SelfDistiller
from executor_svc.drafter_training.trainer import HeadTrainer, TrainSettings

AREAS = ("a piece of creative writing (a story, poem, letter or speech)", "playing a character or a role",
         "a reasoning or logic puzzle", "a mathematics problem", "a programming task",
         "pulling facts out of a short text the user pastes", "a science or engineering question",
         "history, economics, law or philosophy")
K = 3
N = int(sys.argv[1]) if len(sys.argv) > 1 else 384
EPOCHS = int(sys.argv[2]) if len(sys.argv) > 2 else 1
started = time.monotonic()
code, count, head, trainer, seqs, model = load_setup(with_model=True)
tokenizer = AutoTokenizer.from_pretrained("/root/.cache/stepahead/models/SmolLM2-135M-Instruct")
vocab = trainer.embed.shape[0]


def distiller(max_new_tokens):
    return SelfDistiller(model, torch.device("cpu"), [2], max_new_tokens, 0.7, 4096)


def in_batches(prompts, greedy, max_new_tokens, seed):
    out = []
    for index in range(0, len(prompts), 64):
        generator = torch.Generator().manual_seed(seed * 1000 + index)
        out += distiller(max_new_tokens).generate(prompts[index:index + 64], greedy[index:index + 64], generator)
    return out


def self_instruct_questions():
    rng = random.Random(0)
    asks = [f"Write one question or request that a user could send to an AI assistant: {rng.choice(AREAS)}, "
            f"on {rng.choice(TOPICS)}. Reply with the question only." for _ in range(2 * N)]
    written = in_batches([chat_prompt_ids(tokenizer, a) for a in asks], [False] * len(asks), 48, 1)
    questions = []
    for seq in written:
        text = tokenizer.decode(seq.token_ids[seq.prompt_len:], skip_special_tokens=True).strip()
        line = text.split("\n")[0].strip().strip('"')
        if 20 <= len(line) <= 400 and line not in questions:
            questions.append(line)
    return questions[:N]


def distil(texts, seed):
    prompts = [chat_prompt_ids(tokenizer, t) for t in texts]
    return in_batches(prompts, [i % 3 != 2 for i in range(len(prompts))], 128, seed)


def fine_tuned(train):
    tuned = copy.deepcopy(head)
    settings = TrainSettings(epochs=EPOCHS, learning_rate=1e-4, warmup_batches=4)
    tuner = HeadTrainer(tuned, model, label_to_draft_map(tuned.draft_vocab, vocab), settings, 0)
    for _ in range(EPOCHS):
        tuner.train_epoch(train, None)
    tuned.eval()
    for param in tuned.parameters():
        param.requires_grad_(False)
    return tuned


def walked_al(candidate):
    steps = tokens = 0
    for seq in seqs:
        batch, outs, alive = unrolled_drafts(candidate, trainer, seq, K)
        drafts = torch.stack([candidate.draft_vocab[out.logits.argmax(-1)] for out in outs], dim=1)
        accepted = {j: accepted_prefix(drafts[j].tolist(), batch.labels[j + 1:j + 1 + K].tolist())
                    for j in torch.nonzero(alive).flatten().tolist()}
        j = min(accepted) if accepted else None
        while j in accepted:
            steps += 1
            tokens += accepted[j] + 1
            j += accepted[j] + 1
    return tokens / steps


questions = self_instruct_questions()
print(f"{len(questions)} self-instruct questions, e.g.:", *questions[:6], sep="\n  ", flush=True)
templates = training_requests(N, 2)[:N]
print(f"{len(templates)} template requests, e.g.:", *templates[:3], sep="\n  ", flush=True)
data = {"self-instruct": distil(questions, 3), "templates": distil(templates, 4)}
for name, sequences in data.items():
    continuation = sum(len(s.token_ids) - s.prompt_len for s in sequences)
    print(f"{name}: {len(sequences)} sequences, {continuation} continuation tokens", flush=True)
print(f"MT-Bench (all {count}) head-alone walked AL at K={K}:", flush=True)
print(f"  shipped              {walked_al(head):.3f}", flush=True)
for name, sequences in data.items():
    torch.manual_seed(0)
    print(f"  + {EPOCHS} epoch on {name:13s} {walked_al(fine_tuned(sequences)):.3f}", flush=True)
print(f"{time.monotonic() - started:.0f} s", flush=True)
