"""Self-distillation speed with the distiller's sampling as it was (torch.multinomial over every row, greedy rows
included) and as it is (one inverse-CDF draw per sampled row, self_distill.sample_rows): one batch of 64 training
prompts (every third sampled at 0.7), 128 new tokens, alternating rounds, continuation tokens per second.

    python3 bench/experiments/self_distill_sampling_ab.py ROUNDS
"""
import statistics
import sys
import time

import torch
from transformers import AutoTokenizer

import executor_svc.drafter_training.self_distill as sd
from executor_svc.attention.selection import build_attention_backend
from executor_svc.drafter_training.prompts import training_requests
from executor_svc.model_loader import load_model

MODEL = "/root/.cache/stepahead/models/SmolLM2-135M-Instruct"


def multinomial_append_next(self, seqs, logits, generator):
    """The distiller's _append_next before this change."""
    argmax = logits.argmax(dim=-1).tolist()
    probs = torch.softmax(logits / self.temperature, dim=-1)
    sampled = torch.multinomial(probs.cpu(), 1, generator=generator).squeeze(1).tolist()
    for seq, best, drawn in zip(seqs, argmax, sampled):
        seq.labels.append(best)
        token = best if seq.greedy else drawn
        seq.tokens.append(token)
        if token in self.eos or len(seq.tokens) - seq.prompt_len >= self.max_new_tokens:
            seq.done = True


torch.set_num_threads(2)
dev = torch.device("cpu")
model = load_model(MODEL, torch.float32, dev, build_attention_backend("torch", dev))
tok = AutoTokenizer.from_pretrained(MODEL)
prompts = [list(tok.apply_chat_template([{"role": "user", "content": t}], add_generation_prompt=True, tokenize=True,
                                        return_dict=False))[:320] for t in training_requests(64, 0)]
greedy = [i % 3 != 2 for i in range(64)]
current = sd.SelfDistiller._append_next
rates = {"multinomial": [], "inverse_cdf": []}
for round_index in range(int(sys.argv[1])):
    for name, append_next in (("multinomial", multinomial_append_next), ("inverse_cdf", current)):
        sd.SelfDistiller._append_next = append_next
        distiller = sd.SelfDistiller(model, dev, [2], 128, 0.7, 4096)
        began = time.perf_counter()
        seqs = distiller.generate(prompts, greedy, torch.Generator().manual_seed(0))
        seconds = time.perf_counter() - began
        tokens = sum(len(s.token_ids) - s.prompt_len for s in seqs)
        rates[name].append(tokens / seconds)
        print(f"round {round_index + 1} {name}: {tokens} continuation tokens in {seconds:.1f} s, "
              f"{tokens / seconds:.1f} tok/s", flush=True)
for name, values in rates.items():
    print(f"{name}: median {statistics.median(values):.1f} tok/s")
print(f"inverse_cdf / multinomial: {statistics.median(rates['inverse_cdf']) / statistics.median(rates['multinomial']):.2f}x")
