"""What the offline EAGLE experiments share: the default model, the shipped head, and its greedy continuations
(128 tokens) of the first ``NUM_PROMPTS`` (16) MT-Bench first turns, or of stdlib code prompts with ``code`` on the
command line."""
import os
import sys

import torch
from transformers import AutoTokenizer

from client.mtbench import load_mtbench_first_turns
from executor_svc.attention.selection import build_attention_backend
from executor_svc.drafter_training.dataset import label_to_draft_map
from executor_svc.drafter_training.self_distill import SelfDistiller
from executor_svc.drafter_training.trainer import HeadTrainer, TrainSettings
from executor_svc.drafters.eagle_head import load_head
from executor_svc.drafters.shipped import shipped_drafter_for
from executor_svc.model_loader import load_hf_config, load_model
from stepahead_common.stdlib_prompts import code_prompts

MODEL = "/root/.cache/stepahead/models/SmolLM2-135M-Instruct"


def load_setup():
    """(code, count, head, trainer, seqs): trainer carries the embedding, LM rows and RoPE tables the unrolled
    head reads; seqs the greedy continuations."""
    torch.set_num_threads(2)
    count = int(os.environ.get("NUM_PROMPTS", "16"))
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
    head, _ = load_head(str(shipped_drafter_for(model)), cfg, None, torch.float32, dev)
    trainer = HeadTrainer(head, model, label_to_draft_map(head.draft_vocab, cfg.vocab_size), TrainSettings(), 0)
    return code, count, head, trainer, seqs
