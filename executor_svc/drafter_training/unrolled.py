"""The head's forward over packed training sequences, unrolled over draft steps as the drafter runs it.

Step 1 is teacher-forced: entry j reads (f_j, x_{j+1}) and attends causally to the entries 0..j of its own
sequence. Step s > 1 continues the chain started at j as drafting would after accepting x_{j+1}: it reads the
head's own step s-1 output and the token x_{j+s} (equal to the draft whenever the chain is still accepted),
sits at position j + s, and attends to the teacher-forced entries 0..j plus its own chain's later entries.
Training on every step (not only the teacher-forced one) teaches the head to draft from its own features.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from executor_svc.attention.softcap import soft_cap
from executor_svc.drafters.eagle_head import EagleHead
from executor_svc.models.layers import linear, rms_norm


@dataclass
class PackedBatch:
    """Entries of several sequences back to back (entry j of a sequence pairs f_j with x_{j+1})."""

    features: torch.Tensor
    """[n, hidden] f_j"""
    next_tokens: torch.Tensor
    """int64 [n] x_{j+1}"""
    positions: torch.Tensor
    """int64 [n] j (the position of f_j; the head's KV entry j sits there)"""
    seq_ids: torch.Tensor
    """int64 [n] which sequence"""
    remaining: torch.Tensor
    """int64 [n] entries of the same sequence after this one"""
    labels: torch.Tensor
    """int64 [n] the target's greedy choice after position j (-1: none, a prompt position)"""


@dataclass
class StepOutput:
    """One unrolled step: the predicted features and draft-vocabulary logits of every chain."""

    features: torch.Tensor
    logits: torch.Tensor
    valid: torch.Tensor
    """bool [n]: the chain's step exists (its target position is in the sequence)"""
    targets: torch.Tensor
    """int64 [n]: index of the entry whose feature/label this step predicts"""


def unrolled_forward(head: EagleHead, batch: PackedBatch, embed: torch.Tensor, lm_rows: torch.Tensor,
                     cos_table: torch.Tensor, sin_table: torch.Tensor, num_steps: int,
                     input_noise: float = 0.0, generator: torch.Generator | None = None) -> list[StepOutput]:
    """Run ``num_steps`` draft steps for every chain of the batch (with autograd when the head's weights
    require it). ``input_noise``: uniform noise of that half-width added to the teacher features."""
    n = batch.features.shape[0]
    index = torch.arange(n, device=batch.features.device)
    features = batch.features
    if input_noise:
        noise = torch.rand(features.shape, generator=generator, device=features.device)
        features = features + (noise * 2 - 1) * input_noise
    causal = (batch.seq_ids.unsqueeze(1) == batch.seq_ids.unsqueeze(0)) & (index.unsqueeze(1) >= index.unsqueeze(0))
    layer = head.layer
    attention = _ChainAttention(causal, head.attention.scale, head.attention.logit_softcap)
    outputs: list[StepOutput] = []
    tokens = batch.next_tokens
    for step in range(1, num_steps + 1):
        positions = batch.positions + (step - 1)
        cos, sin = cos_table[positions].unsqueeze(1), sin_table[positions].unsqueeze(1)
        x = head.combine(features, embed[tokens])
        normed = layer.attention_input(x)
        hidden = layer.add_branches(x, normed, _attention_block(layer, normed, cos, sin, attention))
        predicted = rms_norm(hidden, head.norm_weight, head.eps)
        valid = batch.remaining >= step
        targets = torch.where(valid, index + step, index)
        outputs.append(StepOutput(predicted, linear(predicted, lm_rows), valid, targets))
        features = predicted.detach()
        tokens = batch.next_tokens[torch.where(valid, index + step, index)]
    return outputs


class _ChainAttention:
    """Attention of step s: teacher-forced keys 0..j (a causal mask) plus the chain's own keys of steps 2..s."""

    def __init__(self, causal: torch.Tensor, scale: float, softcap: float | None = None) -> None:
        self.causal = causal
        self.scale = scale
        self.softcap = softcap
        """Scores become tanh(s / c) * c before the mask, as the served layer's backend caps them (Gemma 2)."""
        self.teacher: tuple[torch.Tensor, torch.Tensor] | None = None
        self.chain: list[tuple[torch.Tensor, torch.Tensor]] = []

    def __call__(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """q [n, H, D], k/v [n, KVH, D] of this step -> [n, H, D]."""
        group = q.shape[1] // k.shape[1]
        k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
        if self.teacher is None:
            self.teacher = (k, v)
        else:
            self.chain.append((k, v))
        teacher_k, teacher_v = self.teacher
        scores = self._capped(torch.einsum("qhd,khd->hqk", q, teacher_k) * self.scale)
        scores = scores.masked_fill(~self.causal, float("-inf"))
        own = [self._capped((q * chain_k).sum(-1).transpose(0, 1).unsqueeze(-1) * self.scale)
               for chain_k, _ in self.chain]
        probs = torch.softmax(torch.cat([scores, *own], dim=-1), dim=-1)
        n = teacher_k.shape[0]
        out = torch.einsum("hqk,khd->qhd", probs[..., :n], teacher_v)
        for i, (_, chain_v) in enumerate(self.chain):
            out = out + probs[..., n + i].transpose(0, 1).unsqueeze(-1) * chain_v
        return out

    def _capped(self, scores: torch.Tensor) -> torch.Tensor:
        return scores if self.softcap is None else soft_cap(scores, self.softcap)


def _attention_block(layer, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, attend: _ChainAttention
                     ) -> torch.Tensor:
    """The layer's attention with ``attend`` in place of the paged backend (same projections and RoPE)."""
    return layer.attn.project_out(attend(*layer.attn.project_qkv(x, cos, sin)))


def step_losses(outputs: list[StepOutput], batch: PackedBatch, label_to_draft: torch.Tensor,
                feature_weight: float) -> tuple[torch.Tensor, list[tuple[int, int]]]:
    """Mean over steps of (feature_weight * smooth-L1 to the target's feature + cross-entropy to its greedy
    choice, mapped into the draft vocabulary); per step (correct, counted) argmax agreements."""
    total = torch.zeros(())
    agreement = []
    for out in outputs:
        labels = batch.labels[out.targets]
        draft_labels = torch.where(labels >= 0, label_to_draft[labels.clamp(min=0)], -1)
        used = out.valid & (draft_labels >= 0)
        if not bool(used.any()):
            agreement.append((0, 0))
            continue
        regression = F.smooth_l1_loss(out.features[used], batch.features[out.targets][used])
        classification = F.cross_entropy(out.logits[used], draft_labels[used])
        total = total + feature_weight * regression + classification
        correct = int((out.logits[used].argmax(-1) == draft_labels[used]).sum())
        agreement.append((correct, int(used.sum())))
    return total / len(outputs), agreement
