"""What the offline EAGLE experiments share: the default model, the shipped head, and its greedy continuations
(128 tokens) of the first ``NUM_PROMPTS`` (16) MT-Bench first turns, or of stdlib code prompts with ``code`` on the
command line; the head's unrolled drafts over one continuation, and how many of n-gram lookup's drafts it accepts."""
import os
import sys

import torch
from transformers import AutoTokenizer

from client.mtbench import load_mtbench_first_turns
from executor_svc.attention.selection import build_attention_backend
from executor_svc.drafter_training.dataset import label_to_draft_map, pack
from executor_svc.drafter_training.self_distill import SelfDistiller
from executor_svc.drafter_training.trainer import HeadTrainer, TrainSettings
from executor_svc.drafter_training.unrolled import unrolled_forward
from executor_svc.drafters.eagle_head import load_head
from executor_svc.drafters.shipped import shipped_drafter_for
from executor_svc.model_loader import load_hf_config, load_model
from stepahead_common.stdlib_prompts import code_prompts

MODEL = "/root/.cache/stepahead/models/SmolLM2-135M-Instruct"


def load_continuations(default_count=16):
    """(code, count, cfg, model, seqs): the default model and its continuations of ``NUM_PROMPTS`` prompts."""
    torch.set_num_threads(2)
    count = int(os.environ.get("NUM_PROMPTS", str(default_count)))
    code = "code" in sys.argv[1:]
    cfg = load_hf_config(MODEL)
    dev = torch.device("cpu")
    model = load_model(MODEL, torch.float32, dev, build_attention_backend("torch", dev))
    tok = AutoTokenizer.from_pretrained(MODEL)
    texts = code_prompts(count) if code else load_mtbench_first_turns(count)
    prompts = [list(tok.apply_chat_template([{"role": "user", "content": p}], add_generation_prompt=True,
                                            tokenize=True, return_dict=False)) for p in texts]
    seqs = SelfDistiller(model, dev, [2], 128, 0.7, 4096).generate(
        prompts, [True] * len(prompts), torch.Generator().manual_seed(0))
    return code, count, cfg, model, seqs


def load_setup(with_model=False):
    """(code, count, head, trainer, seqs): trainer carries the embedding, LM rows and RoPE tables the unrolled
    head reads; seqs the greedy continuations. HEAD_DIR=DIR scores another drafter dir than the shipped one."""
    code, count, cfg, model, seqs = load_continuations()
    head_dir = os.environ.get("HEAD_DIR") or str(shipped_drafter_for(model))
    head, _ = load_head(head_dir, cfg, None, torch.float32, torch.device("cpu"))
    trainer = HeadTrainer(head, model, label_to_draft_map(head.draft_vocab, cfg.vocab_size), TrainSettings(), 0)
    return (code, count, head, trainer, seqs, model) if with_model else (code, count, head, trainer, seqs)


def unrolled_drafts(head, trainer, seq, depth):
    """(batch, outs, alive): the head's ``depth`` unrolled draft steps over one continuation, and the positions
    whose next ``depth`` tokens are all labelled."""
    batch = pack([seq])
    with torch.no_grad():
        outs = unrolled_forward(head, batch, trainer.embed, trainer.lm_rows, trainer.cos, trainer.sin, depth)
    alive = (batch.remaining >= depth) & (batch.labels[outs[0].targets] >= 0)
    return batch, outs, alive


def lookup_accepted(ngram, seq, batch, j, depth):
    """How many of n-gram lookup's drafts at position j the continuation accepts; None when the lookup finds no
    match there."""
    truth = [int(batch.labels[j + i]) for i in range(1, depth + 1)]
    drafts = ngram.lookup(seq.token_ids[: j + 2], depth)
    return accepted_prefix(drafts, truth) if drafts else None


def accepted_prefix(drafts, truth):
    """How many leading drafts greedy verification accepts against the target's tokens ``truth``."""
    accepted = 0
    for draft, token in zip(drafts, truth):
        if draft != token:
            break
        accepted += 1
    return accepted
