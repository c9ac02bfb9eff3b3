"""A/B for issue 20: does the head draft better from several target layers (EAGLE-3 style) than from the top one?

Both variants train on the same data (the shipped drafter's self-distilled set, a train-drafter --keep-work
.train dir) with HeadTrainer's loop (AdamW, warm-up then linear decay, noise, 3 unrolled steps, same seed),
and are scored like eagle_checkpoint_acceptance.py on greedy MT-Bench continuations (and the held-out set).
  top   : the shipped design, step 1 reads f_j (the final-normed last hidden state)
  fused : step 1 reads W [rms(h_low_j); rms(h_mid_j); f_j] (W learned, starts as [0 0 I]); later steps read the
          head's own output as before
The low/mid layer outputs are collected by re-feeding every sequence to the target (prefill, forward hooks).

Usage: python3 bench/experiments/eagle_fused_features.py collect TRAIN_DIR CACHE
       THREADS=1 python3 bench/experiments/eagle_fused_features.py train TRAIN_DIR CACHE top|fused [EPOCHS]
"""
import os
import random
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from transformers import AutoTokenizer

from client.mtbench import load_mtbench_first_turns
from executor_svc.attention.selection import build_attention_backend
from executor_svc.drafter_training.dataset import (batches, draft_vocabulary, label_to_draft_map, load_sequences,
                                                   pack)
from executor_svc.drafter_training.self_distill import BLOCK_SIZE, SelfDistiller
from executor_svc.drafter_training.unrolled import StepOutput, _attention_block, _ChainAttention, step_losses
from executor_svc.drafters.eagle_head import EagleHead
from executor_svc.host_batch import HostBatch
from executor_svc.kv_cache import PagedKVCache
from executor_svc.model_loader import load_hf_config, load_model
from executor_svc.models.layers import linear, rms_norm

MODEL = "/root/.cache/stepahead/models/SmolLM2-135M-Instruct"
LOW, MID = 2, 14  # decoder layer outputs (0-based) of the 30-layer target; the top one is f itself
NUM_TRAIN = 1024
torch.set_num_threads(int(os.environ.get("THREADS", "2")))
mode, train_dir, cache_path = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
cfg = load_hf_config(MODEL)
dev = torch.device("cpu")
model = load_model(MODEL, torch.float32, dev, build_attention_backend("torch", dev))


@torch.inference_mode()
def layer_outputs(token_lists: list[list[int]]) -> list[torch.Tensor]:
    """rms-normed outputs of layers LOW and MID for the fed positions of each sequence: fp16 [num_fed, 2 * hidden]."""
    captured: dict[int, torch.Tensor] = {}
    hooks = [model.layers[i].register_forward_hook(lambda _m, _a, out, i=i: captured.__setitem__(i, out))
             for i in (LOW, MID)]
    head_dim = cfg.hidden_size // cfg.num_attention_heads
    out: list[torch.Tensor] = []
    start = 0
    while start < len(token_lists):
        chunk, size = [], 0
        while start + len(chunk) < len(token_lists) and (not chunk or size + len(token_lists[start + len(chunk)]) <= 4096):
            size += len(token_lists[start + len(chunk)])
            chunk.append(token_lists[start + len(chunk)][:-1])
        blocks = [-(-len(t) // BLOCK_SIZE) for t in chunk]
        cache = PagedKVCache(cfg.num_hidden_layers, sum(blocks), BLOCK_SIZE, cfg.num_key_value_heads, head_dim,
                             torch.float32, dev)
        host = HostBatch(BLOCK_SIZE)
        firsts, used = [], 0
        for tokens, n in zip(chunk, blocks):
            firsts.append(host.add_sequence(tokens, 0, list(range(used, used + n))))
            used += n
        input_ids, positions, meta = host.to_device(dev)
        model(input_ids, positions, meta, cache)
        both = torch.cat([F.rms_norm(captured[i], (cfg.hidden_size,), eps=cfg.rms_norm_eps) for i in (LOW, MID)], -1)
        out += [both[f : f + len(t)].half().clone() for f, t in zip(firsts, chunk)]
        start += len(chunk)
    for hook in hooks:
        hook.remove()
    return out


def load_data():
    seqs = [s for path in sorted(train_dir.glob("data-*.pt")) for s in load_sequences(path)]
    return seqs[:NUM_TRAIN], seqs[NUM_TRAIN:]


if mode == "collect":
    train, held = load_data()
    began = time.monotonic()
    extras = layer_outputs([s.token_ids for s in train + held])
    torch.save(extras, cache_path)
    print(f"collected {sum(e.shape[0] for e in extras)} positions in {time.monotonic() - began:.0f} s")
    sys.exit(0)

variant = sys.argv[4]
epochs = int(sys.argv[5]) if len(sys.argv) > 5 else 3
train, held = load_data()
extras = torch.load(cache_path, weights_only=True)
for seq, extra in zip(train + held, extras):
    seq.extra = extra.float()
hidden = cfg.hidden_size
vocab, _ = draft_vocabulary(train, 4096, cfg.vocab_size)
torch.manual_seed(0)
head = EagleHead(cfg, 4096)
head.draft_vocab.copy_(vocab)
head.initialise(0)
fuse = torch.zeros(hidden, 3 * hidden)
fuse[:, 2 * hidden :] = torch.eye(hidden)
fuse += torch.randn(fuse.shape, generator=torch.Generator().manual_seed(1)) * 0.02
fuse = torch.nn.Parameter(fuse) if variant == "fused" else None
params = [p for p in head.parameters()] + ([fuse] if fuse is not None else [])
for p in params:
    p.requires_grad_(True)
optimizer = torch.optim.AdamW(params, lr=1e-3, weight_decay=0.0)
embed = model.embed_weight.detach().float()
lm_rows = model.lm_head_weight.detach().float()[vocab]
cos_table, sin_table = model.rope_cos.float(), model.rope_sin.float()
to_draft = label_to_draft_map(vocab, cfg.vocab_size)


def forward(group, noise: float, generator=None) -> tuple:
    batch = pack(group)
    extra = torch.cat([s.extra for s in group])
    n = batch.features.shape[0]
    index = torch.arange(n)
    features = batch.features
    if noise:
        features = features + (torch.rand(features.shape, generator=generator) * 2 - 1) * noise
        extra = extra + (torch.rand(extra.shape, generator=generator) * 2 - 1) * noise
    if fuse is not None:
        features = linear(torch.cat((extra, features), -1), fuse)
    causal = (batch.seq_ids.unsqueeze(1) == batch.seq_ids.unsqueeze(0)) & (index.unsqueeze(1) >= index.unsqueeze(0))
    layer = head.layer
    attention = _ChainAttention(causal, layer.attn.scale)
    outputs, tokens = [], batch.next_tokens
    for step in range(1, 4):
        positions = batch.positions + (step - 1)
        cos, sin = cos_table[positions].unsqueeze(1), sin_table[positions].unsqueeze(1)
        x = head.combine(features, embed[tokens])
        h = x + _attention_block(layer, rms_norm(x, layer.input_norm_weight, layer.eps), cos, sin, attention)
        h = h + layer.mlp(rms_norm(h, layer.post_attention_norm_weight, layer.eps))
        predicted = rms_norm(h, head.norm_weight, head.eps)
        valid = batch.remaining >= step
        targets = torch.where(valid, index + step, index)
        outputs.append(StepOutput(predicted, linear(predicted, lm_rows), valid, targets))
        features = predicted.detach()
        tokens = batch.next_tokens[targets]
    return batch, outputs


@torch.no_grad()
def acceptance(seqs) -> str:
    accepted_at, chains = [0, 0, 0], 0
    for group in batches(seqs, 512, random.Random(0)):
        batch, outputs = forward(group, 0.0)
        alive = (batch.remaining >= 3) & (batch.labels[outputs[0].targets] >= 0)
        chains += int(alive.sum())
        for step, out in enumerate(outputs):
            alive = alive & (vocab[out.logits.argmax(-1)] == batch.labels[out.targets])
            accepted_at[step] += int(alive.sum())
    rates, previous = [], chains
    for a in accepted_at:
        rates.append(a / max(1, previous))
        previous = a
    return f"acceptance length {1 + sum(accepted_at) / max(1, chains):.2f} (per position " + \
        " ".join(f"{r:.2f}" for r in rates) + ")"


tok = AutoTokenizer.from_pretrained(MODEL)
prompts = [list(tok.apply_chat_template([{"role": "user", "content": p}], add_generation_prompt=True, tokenize=True,
                                        return_dict=False)) for p in load_mtbench_first_turns(16)]
mtbench = SelfDistiller(model, dev, [2], 128, 0.7, 4096).generate(prompts, [True] * 16, torch.Generator().manual_seed(0))
for seq, extra in zip(mtbench, layer_outputs([s.token_ids for s in mtbench])):
    seq.extra = extra.float()

began = time.monotonic()
total = None
for epoch in range(epochs):
    groups = batches(train, 512, random.Random(epoch))
    generator = torch.Generator().manual_seed(epoch)
    total = total or epochs * len(groups)
    loss_sum = 0.0
    for i, group in enumerate(groups):
        step_index = epoch * len(groups) + i
        lr = 1e-3 * (step_index + 1) / 20 if step_index < 20 else 1e-3 * (1 - 0.9 * (step_index - 20) / (total - 20))
        for g in optimizer.param_groups:
            g["lr"] = lr
        batch, outputs = forward(group, 0.05, generator)
        loss, _ = step_losses(outputs, batch, to_draft, 0.2)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        optimizer.step()
        loss_sum += float(loss)
    print(f"{variant} epoch {epoch + 1}: loss {loss_sum / len(groups):.3f}; held-out {acceptance(held)}; "
          f"MT-Bench {acceptance(mtbench)}; {time.monotonic() - began:.0f} s", flush=True)
