"""An EAGLE-style head's one-token draft step in the shape step graphs capture.

``StepGraphs`` captures a model called as ``model(input_ids, positions, meta, kv_cache)`` that reads nothing but
its arguments. A draft step of the head also reads each request's predicted feature from the previous step:
that input lives here, in a static buffer the drafter fills (on the device) before each replay, beside the
input ids the graphs' own buffers hold. ``compute_logits`` scores the draft vocabulary only.
"""

from __future__ import annotations

import torch

from executor_svc.attention.metadata import AttentionMetadata
from executor_svc.drafters.eagle_head import EagleHead
from executor_svc.kv_cache import PagedKVCache
from executor_svc.models.layers import linear


class EagleStepModel:
    """The head's draft step over the target's embedding, RoPE tables and LM-head rows of the draft vocabulary,
    with its feature input in a fixed buffer of ``max_rows`` rows."""

    def __init__(self, head: EagleHead, embed: torch.Tensor, lm_rows: torch.Tensor, rope_cos: torch.Tensor,
                 rope_sin: torch.Tensor, max_rows: int) -> None:
        self.head = head
        self.embed = embed
        self.lm_rows = lm_rows
        self.rope_cos, self.rope_sin = rope_cos, rope_sin
        self.features = torch.zeros((max_rows, embed.shape[1]), dtype=embed.dtype, device=embed.device)
        """[max_rows, hidden]: row i is the i-th flat token's input feature (written before each step)."""

    def __call__(self, input_ids: torch.Tensor, positions: torch.Tensor, meta: AttentionMetadata,
                 kv_cache: PagedKVCache) -> torch.Tensor:
        """Predicted features [T, hidden] of the flat tokens (T = len(input_ids))."""
        cos, sin = self.rope_cos[positions].unsqueeze(1), self.rope_sin[positions].unsqueeze(1)
        embeds = self.embed.index_select(0, input_ids)
        return self.head(self.features[: input_ids.shape[0]], embeds, cos, sin, kv_cache.layers[0], meta)

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Logits [T, draft vocabulary] in float32."""
        return linear(hidden, self.lm_rows).float()
