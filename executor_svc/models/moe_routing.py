"""Which experts each token runs, and with what weights: the router of every MoE family served.

- softmax routers (Mixtral, Qwen-MoE, Granite, OLMoE, DeepSeek-V2, ERNIE 4.5, GPT-OSS): the top-k of the router's
  softmax; DeepSeek-V2's ``group_limited_greedy`` first keeps the experts of the groups whose best expert scores
  highest, ERNIE's chooses with a correction bias added, GPT-OSS's router adds a bias to its logits.
- sigmoid routers (DeepSeek-V3, GLM-4.5, dots.llm1, MiniMax-M2): each expert scored by a sigmoid; the choice adds
  a learned per-expert correction bias (load balancing) to the scores and keeps the groups whose two best experts
  score highest, while the weights are the scores themselves. Mistral 4 groups its softmax so too.
- Llama 4's: the top-k logits choose (no sigmoid first: large logits would tie once squashed), each weighted by its
  sigmoid.

Every step is a tensor operation (top-k, scatter, gather): nothing is read on the host, so captured steps route too.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from executor_svc.models.layers import linear
from executor_svc.models.moe_settings import MoeSettings


def route(x: torch.Tensor, router_weight: torch.Tensor, settings: MoeSettings,
          correction_bias: torch.Tensor | None = None, router_bias: torch.Tensor | None = None
          ) -> tuple[torch.Tensor, torch.Tensor]:
    """x [T, hidden] -> (float32 weights [T, top_k], expert ids int64 [T, top_k]).

    ``correction_bias`` [E]: added to the scores for the choice only (DeepSeek-V3's e_score_correction_bias);
    ``router_bias`` [E]: added to the logits (GPT-OSS, whose softmax over the top-k logits is the top-k of the
    softmax normalised)."""
    if settings.float32_router:
        logits = F.linear(x.float(), router_weight.float(), None if router_bias is None else router_bias.float())
    else:
        logits = linear(x, router_weight, router_bias).float()
    if settings.scoring == "sigmoid_of_top_logits":
        top = torch.topk(logits, settings.top_k, dim=-1)
        return top.values.sigmoid(), top.indices
    sigmoid = settings.scoring == "sigmoid"
    scores = logits.sigmoid() if sigmoid else torch.softmax(logits, dim=-1)
    choice = scores + correction_bias.float() if correction_bias is not None else scores
    if settings.top_groups < settings.num_groups:
        choice = _within_top_groups(choice, settings, fill=float("-inf") if sigmoid else 0.0)
    ids = torch.topk(choice, settings.top_k, dim=-1).indices
    weights = scores.gather(1, ids)
    if settings.normalize_top_k:
        # The sigmoid routers add 1e-20 (their scores need not sum to anything); softmax routers divide as they are.
        total = weights.sum(dim=-1, keepdim=True)
        weights = weights / (total + 1e-20 if sigmoid else total)
    if settings.routed_scaling_factor != 1.0:
        weights = weights * settings.routed_scaling_factor
    return weights, ids


def _within_top_groups(choice: torch.Tensor, settings: MoeSettings, fill: float) -> torch.Tensor:
    """``choice`` [T, E] with the experts outside each token's ``top_groups`` best groups set to ``fill``. A group
    scores its two best experts' sum (sigmoid routers, Mistral 4) or its best expert (DeepSeek-V2)."""
    tokens, experts = choice.shape
    grouped = choice.view(tokens, settings.num_groups, experts // settings.num_groups)
    if settings.groups_score_top_two:
        group_scores = grouped.topk(2, dim=-1).values.sum(dim=-1)
    else:
        group_scores = grouped.max(dim=-1).values
    best_groups = torch.topk(group_scores, settings.top_groups, dim=-1).indices
    keep = torch.zeros_like(group_scores, dtype=torch.bool).scatter(1, best_groups, True)
    return grouped.masked_fill(~keep.unsqueeze(-1), fill).view(tokens, experts)
