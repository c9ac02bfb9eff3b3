"""The EAGLE-style head's forward over the target's embedding, RoPE tables and LM-head rows, eager and in the
shape step graphs capture.

``StepGraphs`` captures a model called as ``model(input_ids, positions, meta, kv_cache)`` that reads nothing but
its arguments. A draft step of the head also reads each request's predicted feature from the previous step: in
the captured form that input lives in a static buffer (``reserve_features``) the drafter fills on the device
before each replay, beside the input ids the graphs' own buffers hold. ``compute_logits`` scores the draft
vocabulary only.
"""

from __future__ import annotations

import torch

from executor_svc.attention.metadata import AttentionMetadata
from executor_svc.drafters.eagle_head import EagleHead
from executor_svc.kv_cache import PagedKVCache
from executor_svc.models.layers import linear
from executor_svc.row_argmax import row_argmax


class EagleStepModel:
    """The head over the target's shared tensors: ``predict`` for any batch, ``__call__`` (with the feature
    buffer) for captured one-token steps."""

    def __init__(self, head: EagleHead, target) -> None:
        """``target``: the target model (its embedding, LM head rows and RoPE tables are shared)."""
        self.head = head
        self.embed = target.embed_weight
        self.lm_rows = target.lm_head_weight.index_select(0, head.draft_vocab).contiguous()
        """[N, hidden]: the target's LM head rows of the draft vocabulary."""
        self.rope_cos, self.rope_sin = target.rope_cos, target.rope_sin
        self.features = torch.zeros((0, self.embed.shape[1]), dtype=self.embed.dtype, device=self.embed.device)
        """[rows, hidden]: row i is the i-th flat token's input feature of a captured step (``reserve_features``)."""

    def reserve_features(self, max_rows: int) -> None:
        """Allocate the static feature buffer captured steps read (before capturing them)."""
        self.features = torch.zeros((max_rows, self.embed.shape[1]), dtype=self.embed.dtype, device=self.embed.device)

    def predict(self, features: torch.Tensor, input_ids: torch.Tensor, positions: torch.Tensor,
                meta: AttentionMetadata, kv_cache: PagedKVCache) -> torch.Tensor:
        """Predicted features [T, hidden] of the flat tokens from their input features and ids."""
        cos, sin = self.rope_cos[positions].unsqueeze(1), self.rope_sin[positions].unsqueeze(1)
        embeds = self.embed.index_select(0, input_ids)
        return self.head(features.to(embeds.dtype), embeds, cos, sin, kv_cache.layers[0], meta)

    def __call__(self, input_ids: torch.Tensor, positions: torch.Tensor, meta: AttentionMetadata,
                 kv_cache: PagedKVCache) -> torch.Tensor:
        """``predict`` with the input features read from the static buffer (the form step graphs capture)."""
        return self.predict(self.features[: input_ids.shape[0]], input_ids, positions, meta, kv_cache)

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Logits [T, draft vocabulary] in float32."""
        return linear(hidden, self.lm_rows).float()

    def draft_ids(self, logits: torch.Tensor) -> torch.Tensor:
        """Argmax over the draft vocabulary, as target ids (on the device)."""
        return self.head.draft_vocab.index_select(0, row_argmax(logits))
