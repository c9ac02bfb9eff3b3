"""Reading one LoRA adapter saved by peft (adapter_config.json + adapter_model.safetensors) for a Llama-family model.

Only plain LoRA on the attention and MLP projections is served: the options that change the math in other ways
(DoRA, LoRA biases, per-module ranks or alphas, extra trained modules or tokens, ...) are refused by name, as are
tensors this model code has no place for, so an adapter is either served exactly or not at all."""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from executor_svc.lora.module_spec import LoraModuleSpec

PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
"""The projections an adapter may adapt (peft's module names in Llama-family checkpoints)."""

_TENSOR_NAME = re.compile(
    r"^base_model\.model\.model\.layers\.(\d+)\.(?:self_attn|mlp)\."
    r"(" + "|".join(PROJECTIONS) + r")\.lora_([AB])\.weight$"
)
_CONFIG_FILE = "adapter_config.json"
_WEIGHTS_FILE = "adapter_model.safetensors"

# adapter_config.json options that would change what the adapter computes, with the value that leaves it plain LoRA.
_PLAIN_LORA_OPTIONS: dict[str, Any] = {
    "use_dora": False,
    "lora_bias": False,
    "bias": "none",
    "fan_in_fan_out": False,
    "modules_to_save": None,
    "rank_pattern": {},
    "alpha_pattern": {},
    "layer_replication": None,
    "trainable_token_indices": None,
    "alora_invocation_tokens": None,
    "use_qalora": False,
    "use_bdlora": None,
    "target_parameters": None,
}


@dataclass(frozen=True)
class LoraAdapter:
    """An adapter's weights in the checkpoint's (unsharded) shapes: per (layer, projection), A [r, in] and
    B [out, r], and the factor peft scales B @ A by."""

    name: str
    rank: int
    scaling: float
    weights: dict[tuple[int, str], tuple[torch.Tensor, torch.Tensor]]


def read_adapter(spec: LoraModuleSpec, hf_config: Any) -> LoraAdapter:
    """The adapter at ``spec.path`` for a model of ``hf_config``; FileNotFoundError / ValueError name the adapter
    and what is wrong."""
    directory = Path(spec.path)
    where = f"lora_modules: adapter {spec.name!r} ({directory})"
    for file in (_CONFIG_FILE, _WEIGHTS_FILE):
        if not (directory / file).is_file():
            raise FileNotFoundError(f"{where}: {file} is missing")
    rank, scaling = _read_config(directory / _CONFIG_FILE, where)
    weights = _read_weights(directory / _WEIGHTS_FILE, hf_config, rank, where)
    return LoraAdapter(spec.name, rank, scaling, weights)


def _read_config(path: Path, where: str) -> tuple[int, float]:
    """(rank, scaling) from adapter_config.json, parsed by peft, refusing options that are not plain LoRA."""
    from peft import LoraConfig

    try:
        raw = json.loads(path.read_text())
    except (OSError, ValueError) as error:
        raise ValueError(f"{where}: {path.name} is not valid JSON ({error})") from error
    if not isinstance(raw, dict) or raw.get("peft_type") != "LORA":
        found = raw.get("peft_type") if isinstance(raw, dict) else None
        raise ValueError(f"{where}: peft_type must be LORA, got {found!r}")
    config = LoraConfig.from_pretrained(str(path.parent))
    for option, plain in _PLAIN_LORA_OPTIONS.items():
        value = getattr(config, option, plain)
        if value != plain and (value or plain):  # an empty list or dict where None is plain is plain too
            raise ValueError(f"{where}: {option}={value!r} is not supported (plain LoRA only)")
    rank, alpha = config.r, config.lora_alpha
    if not isinstance(rank, int) or rank < 1:
        raise ValueError(f"{where}: r must be a positive integer, got {rank!r}")
    scaling = alpha / math.sqrt(rank) if config.use_rslora else alpha / rank
    return rank, float(scaling)


def _read_weights(path: Path, hf_config: Any, rank: int, where: str
                  ) -> dict[tuple[int, str], tuple[torch.Tensor, torch.Tensor]]:
    from safetensors import safe_open

    halves: dict[tuple[int, str], dict[str, torch.Tensor]] = {}
    with safe_open(str(path), framework="pt", device="cpu") as handle:
        for name in handle.keys():
            match = _TENSOR_NAME.match(name)
            if match is None:
                raise ValueError(f"{where}: tensor {name!r} is not a LoRA A/B weight of {', '.join(PROJECTIONS)}")
            layer, projection, half = int(match.group(1)), match.group(2), match.group(3)
            if layer >= hf_config.num_hidden_layers:
                raise ValueError(f"{where}: tensor {name!r} names layer {layer}; the model has "
                                 f"{hf_config.num_hidden_layers}")
            halves.setdefault((layer, projection), {})[half] = handle.get_tensor(name)
    weights = {}
    for (layer, projection), pair in sorted(halves.items()):
        if set(pair) != {"A", "B"}:
            raise ValueError(f"{where}: layer {layer} {projection} has lora_{''.join(pair)} but not both A and B")
        in_features, out_features = _projection_shape(hf_config, projection)
        expected = {"A": (rank, in_features), "B": (out_features, rank)}
        for half, tensor in pair.items():
            if tuple(tensor.shape) != expected[half]:
                raise ValueError(f"{where}: layer {layer} {projection}.lora_{half} has shape {tuple(tensor.shape)}, "
                                 f"expected {expected[half]}")
        weights[(layer, projection)] = (pair["A"], pair["B"])
    if not weights:
        raise ValueError(f"{where}: {path.name} holds no LoRA weights")
    return weights


def _projection_shape(hf_config: Any, projection: str) -> tuple[int, int]:
    """(in_features, out_features) of a projection in the checkpoint."""
    hidden = hf_config.hidden_size
    head_dim = getattr(hf_config, "head_dim", None) or hidden // hf_config.num_attention_heads
    q_rows, kv_rows = hf_config.num_attention_heads * head_dim, hf_config.num_key_value_heads * head_dim
    intermediate = hf_config.intermediate_size
    return {
        "q_proj": (hidden, q_rows),
        "k_proj": (hidden, kv_rows),
        "v_proj": (hidden, kv_rows),
        "o_proj": (q_rows, hidden),
        "gate_proj": (hidden, intermediate),
        "up_proj": (hidden, intermediate),
        "down_proj": (intermediate, hidden),
    }[projection]
