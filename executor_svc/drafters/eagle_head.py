"""The EAGLE-style draft head: one decoder layer that predicts the target's next feature.

Entry j of a sequence pairs the target's feature f_j (its final-normed last hidden state at position j,
the vector its LM head reads) with the embedding of token x_{j+1}; the head maps the pair to a prediction
of f_{j+1}, and the target's LM head rows for the draft vocabulary turn that into a draft of x_{j+2}.
Later draft steps feed the head its own prediction in place of the target's feature.

The layer has the target's layer shape (so it reuses the target's RoPE tables and attention backend), and
its entries sit at the position of their token x_{j+1} in a one-layer paged KV cache addressed by the
target's block ids. Only the head's own weights and the draft vocabulary are saved: the embedding and the
LM head rows are the target's.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import torch
from torch import nn

from executor_svc.attention.backend import AttentionBackend
from executor_svc.attention.metadata import AttentionMetadata
from executor_svc.models.layers import linear, rms_norm
from executor_svc.models.llama import LlamaAttention, LlamaDecoderLayer
from executor_svc.models.mla_settings import mla_settings_for
from executor_svc.models.variants import norm_eps_of, variant_for

if TYPE_CHECKING:
    from transformers import PretrainedConfig

FORMAT = "stepahead-eagle-1"
WEIGHTS_FILE = "model.safetensors"
CONFIG_FILE = "config.json"


@dataclass(frozen=True)
class EagleHeadConfig:
    """What a saved head is and which target it was trained for (checked at load)."""

    draft_vocab_size: int
    target_vocab_size: int
    target_hidden_size: int
    target_num_hidden_layers: int
    target_model_type: str
    seed: int = 0
    target_probe: list[float] | None = None
    """A few of the target's embedding values (drafters/shipped.py): which weights it was trained on."""
    training: dict[str, Any] | None = None
    """How it was trained (data, steps, held-out acceptance): informational."""

    def __post_init__(self) -> None:
        if not 1 <= self.draft_vocab_size <= self.target_vocab_size:
            raise ValueError(f"draft_vocab_size: must be in [1, {self.target_vocab_size}], got {self.draft_vocab_size}")

    @classmethod
    def for_target(cls, target_config: PretrainedConfig, draft_vocab_size: int, seed: int = 0,
                   target_probe: list[float] | None = None, training: dict[str, Any] | None = None
                   ) -> EagleHeadConfig:
        return cls(draft_vocab_size, target_config.vocab_size, target_config.hidden_size,
                   target_config.num_hidden_layers, str(getattr(target_config, "model_type", "")), seed,
                   target_probe, training)

    def check_target(self, target_config: PretrainedConfig, where: str) -> None:
        """ValueError naming the field when the head was trained for another target shape."""
        expected = EagleHeadConfig.for_target(target_config, min(self.draft_vocab_size, target_config.vocab_size))
        for name in ("target_vocab_size", "target_hidden_size", "target_num_hidden_layers", "target_model_type"):
            if getattr(self, name) != getattr(expected, name):
                raise ValueError(f"{name}: the EAGLE drafter {where} was trained for {getattr(self, name)!r}, "
                                 f"the target has {getattr(expected, name)!r}")


class EagleHead(nn.Module):
    """fc([embedding(x_{j+1}); f_j]) -> one decoder layer -> RMSNorm: the predicted f_{j+1}."""

    def __init__(self, target_config: PretrainedConfig, draft_vocab_size: int,
                 attention_backend: AttentionBackend | None = None) -> None:
        super().__init__()
        variant = variant_for(target_config)
        if mla_settings_for(target_config) is not None or variant.attention_sinks or any(variant.layer_chunks):
            raise ValueError(f"model_type: EAGLE-style drafters are not built for latent-attention, attention-sink or "
                             f"chunked-attention targets ({target_config.model_type}); use --spec-method ngram or "
                             "draft_model")
        hidden = target_config.hidden_size
        self.eps = norm_eps_of(target_config)
        self.fc_weight = nn.Parameter(torch.empty(hidden, 2 * hidden), requires_grad=False)
        self.layer = LlamaDecoderLayer(target_config, attention_backend)  # type: ignore[arg-type]
        self.norm_weight = nn.Parameter(torch.ones(hidden), requires_grad=False)
        self.draft_vocab: torch.Tensor
        self.register_buffer("draft_vocab", torch.arange(draft_vocab_size, dtype=torch.int64))
        """int64 [N]: the target id of each draft-vocabulary entry (most frequent first)."""

    @property
    def attention(self) -> LlamaAttention:
        """The layer's attention (never latent attention: refused for such targets at construction)."""
        return cast(LlamaAttention, self.layer.attn)

    def combine(self, features: torch.Tensor, token_embeds: torch.Tensor) -> torch.Tensor:
        """[T, hidden] features and [T, hidden] embeddings -> the layer's input [T, hidden]."""
        return linear(torch.cat((token_embeds, features), dim=-1), self.fc_weight)

    def forward(self, features: torch.Tensor, token_embeds: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                kv_layer: torch.Tensor, meta: AttentionMetadata) -> torch.Tensor:
        """Paged forward of T entries (writes their K/V) -> predicted features [T, hidden]."""
        hidden = self.layer(self.combine(features, token_embeds), cos, sin, kv_layer, meta)
        return rms_norm(hidden, self.norm_weight, self.eps)

    def initialise(self, seed: int) -> None:
        """Seeded random weights (training starts here): fc near [0; I] so f_j passes through at first."""
        generator = torch.Generator().manual_seed(seed)
        hidden = self.norm_weight.shape[0]
        with torch.no_grad():
            for name, param in self.named_parameters():
                if name.endswith("norm_weight"):
                    param.fill_(1.0)
                elif "bias" in name:
                    param.zero_()
                else:
                    param.copy_(torch.randn(param.shape, generator=generator) * 0.02)
            self.fc_weight[:, hidden:] += torch.eye(hidden)


def save_head(head: EagleHead, config: EagleHeadConfig, out_dir: Path) -> None:
    """Write the head's weights (safetensors, fp32) and its config into out_dir."""
    from safetensors.torch import save_file

    out_dir.mkdir(parents=True, exist_ok=True)
    tensors = {name: tensor.detach().to("cpu", torch.float32 if tensor.is_floating_point() else tensor.dtype)
               .contiguous() for name, tensor in head.state_dict().items()}
    save_file(tensors, str(out_dir / WEIGHTS_FILE))
    (out_dir / CONFIG_FILE).write_text(json.dumps({"format": FORMAT, **asdict(config)}, indent=2) + "\n")


def read_head_config(head_dir: str | Path) -> EagleHeadConfig:
    """The saved config; FileNotFoundError/ValueError name the path or the field."""
    path = Path(head_dir) / CONFIG_FILE
    if not path.is_file():
        raise FileNotFoundError(f"eagle_dir: {path} is missing")
    raw = json.loads(path.read_text())
    if raw.pop("format", None) != FORMAT:
        raise ValueError(f"eagle_dir: {path} is not a {FORMAT} drafter config")
    return EagleHeadConfig(**raw)


def load_head(head_dir: str | Path, target_config: PretrainedConfig, attention_backend: AttentionBackend | None,
              dtype: torch.dtype, device: torch.device | str) -> tuple[EagleHead, EagleHeadConfig]:
    """Load a saved head for this target (ValueError naming the field when it does not fit)."""
    from safetensors.torch import load_file

    config = read_head_config(head_dir)
    config.check_target(target_config, str(head_dir))
    head = EagleHead(target_config, config.draft_vocab_size, attention_backend)
    state = load_file(str(Path(head_dir) / WEIGHTS_FILE))
    missing = set(head.state_dict()) - set(state)
    if missing:
        raise ValueError(f"eagle_dir: {head_dir} lacks weights {sorted(missing)}")
    head.load_state_dict(state)
    vocab = head.draft_vocab
    if vocab.min() < 0 or vocab.max() >= target_config.vocab_size or vocab.unique().numel() != vocab.numel():
        raise ValueError(f"draft_vocab: {head_dir} must list distinct target ids below {target_config.vocab_size}")
    head.to(device=device)
    head.to(dtype=dtype)  # floating tensors only; draft_vocab stays int64
    return head, config
