"""Reading one LoRA adapter saved by peft (adapter_config.json + adapter_model.safetensors) for a Llama-family model.

Only LoRA on the attention and MLP projections is served (any ranks and alphas, per-module ones from rank_pattern and
alpha_pattern matched as peft matches them, rsLoRA, a subset of layers; on MoE models the attention only): the options
that change the math in other ways (DoRA, LoRA biases, extra trained modules or tokens, ...) are refused by name, as
are tensors this model code has no place for, so an adapter is either served exactly or not at all."""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from executor_svc.lora.module_spec import LoraModuleSpec
from executor_svc.models.mla_settings import mla_settings_for
from executor_svc.models.moe_settings import is_moe
from executor_svc.models.variants import has_fused_checkpoint, has_fused_qkv

PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
"""The projections an adapter may adapt (peft's module names in Llama-family checkpoints)."""
FUSED_PROJECTIONS = {"qkv_proj": ("q_proj", "k_proj", "v_proj"), "gate_up_proj": ("gate_proj", "up_proj")}
"""Phi-3's fused modules and the projections they stack by rows: an adapter of one is an adapter of each part
with the same A and that part's rows of B (exactly the fused update, row by row)."""

_TENSOR_NAME = re.compile(
    r"^base_model\.model\.model\.layers\.(\d+)\.(?:self_attn|mlp)\."
    r"(" + "|".join((*PROJECTIONS, *FUSED_PROJECTIONS)) + r")\.lora_([AB])\.weight$"
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
    "layer_replication": None,
    "trainable_token_indices": None,
    "alora_invocation_tokens": None,
    "use_qalora": False,
    "use_bdlora": None,
    "target_parameters": None,
}


@dataclass(frozen=True)
class LoraModule:
    """One adapted projection: A [r, in] and B [out, r] in the checkpoint's (unsharded) shapes, and the factor peft
    scales B @ A by."""

    a: torch.Tensor
    b: torch.Tensor
    scaling: float

    @property
    def rank(self) -> int:
        return self.a.shape[0]


@dataclass(frozen=True)
class _RankRule:
    """adapter_config.json's ranks and alphas: the defaults and peft's per-module patterns."""

    rank: int
    alpha: float
    rank_pattern: dict[str, int]
    alpha_pattern: dict[str, float]
    rslora: bool

    def rank_and_scaling(self, module_key: str) -> tuple[int, float]:
        """(r, scaling) of the module named ``module_key`` in the base model, as peft resolves them."""
        from peft.utils.other import get_pattern_key

        rank = self.rank_pattern.get(get_pattern_key(list(self.rank_pattern), module_key), self.rank)
        alpha = self.alpha_pattern.get(get_pattern_key(list(self.alpha_pattern), module_key), self.alpha)
        return rank, float(alpha / math.sqrt(rank) if self.rslora else alpha / rank)


@dataclass(frozen=True)
class LoraAdapter:
    """An adapter's adapted projections, by (layer, projection name)."""

    name: str
    modules: dict[tuple[int, str], LoraModule]

    @property
    def rank(self) -> int:
        """The largest rank among its modules."""
        return max(module.rank for module in self.modules.values())


def read_adapter(spec: LoraModuleSpec, hf_config: Any) -> LoraAdapter:
    """The adapter at ``spec.path`` for a model of ``hf_config``; FileNotFoundError / ValueError name the adapter
    and what is wrong."""
    directory = Path(spec.path)
    where = f"lora_modules: adapter {spec.name!r} ({directory})"
    if mla_settings_for(hf_config) is not None:
        raise ValueError(f"{where}: LoRA adapters of latent-attention models ({hf_config.model_type}) are not "
                         "supported: their attention's projections are not adapted and their experts neither")
    for file in (_CONFIG_FILE, _WEIGHTS_FILE):
        if not (directory / file).is_file():
            raise FileNotFoundError(f"{where}: {file} is missing")
    rule = _read_config(directory / _CONFIG_FILE, where)
    return LoraAdapter(spec.name, _read_modules(directory / _WEIGHTS_FILE, hf_config, rule, where))


def _read_config(path: Path, where: str) -> _RankRule:
    """The ranks and alphas of adapter_config.json, parsed by peft, refusing options that are not plain LoRA."""
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
    rule = _RankRule(config.r, config.lora_alpha, dict(config.rank_pattern or {}), dict(config.alpha_pattern or {}),
                     bool(config.use_rslora))
    for rank in (rule.rank, *rule.rank_pattern.values()):
        if not isinstance(rank, int) or rank < 1:
            raise ValueError(f"{where}: r and rank_pattern's ranks must be positive integers, got {rank!r}")
    return rule


def _read_modules(path: Path, hf_config: Any, rule: _RankRule, where: str) -> dict[tuple[int, str], LoraModule]:
    from safetensors import safe_open

    module_names = _module_names(hf_config)
    halves: dict[tuple[int, str], dict[str, torch.Tensor]] = {}
    with safe_open(str(path), framework="pt", device="cpu") as handle:
        for name in handle.keys():
            match = _TENSOR_NAME.match(name)
            if match is None:
                raise ValueError(f"{where}: tensor {name!r} is not a LoRA A/B weight of {', '.join(PROJECTIONS)}")
            layer, projection, half = int(match.group(1)), match.group(2), match.group(3)
            if projection not in module_names:
                raise ValueError(f"{where}: tensor {name!r} adapts {projection}, which this model does not have "
                                 f"(its modules: {', '.join(module_names)})")
            if layer >= hf_config.num_hidden_layers:
                raise ValueError(f"{where}: tensor {name!r} names layer {layer}; the model has "
                                 f"{hf_config.num_hidden_layers}")
            halves.setdefault((layer, projection), {})[half] = handle.get_tensor(name)
    modules = {}
    for (layer, projection), pair in sorted(halves.items()):
        if set(pair) != {"A", "B"}:
            raise ValueError(f"{where}: layer {layer} {projection} has lora_{''.join(pair)} but not both A and B")
        rank, scaling = rule.rank_and_scaling(module_name(layer, projection))
        in_features, out_features = projection_shape(hf_config, projection)
        expected = {"A": (rank, in_features), "B": (out_features, rank)}
        for half, tensor in pair.items():
            if tuple(tensor.shape) != expected[half]:
                raise ValueError(f"{where}: layer {layer} {projection}.lora_{half} has shape {tuple(tensor.shape)}, "
                                 f"expected {expected[half]}")
        modules.update(_split_parts(layer, projection, LoraModule(pair["A"], pair["B"], scaling), hf_config))
    if not modules:
        raise ValueError(f"{where}: {path.name} holds no LoRA weights")
    return modules


def _module_names(hf_config: Any) -> tuple[str, ...]:
    """The adaptable modules of the checkpoint: Phi-3's q/k/v and gate/up are fused, GLM's gate/up, the rest of the
    family's separate; a MoE model's attention only (its experts are not adapted)."""
    attention = ("qkv_proj", "o_proj") if has_fused_qkv(hf_config) else PROJECTIONS[:4]
    if is_moe(hf_config):
        return attention
    mlp = ("gate_up_proj", "down_proj") if has_fused_checkpoint(hf_config) else PROJECTIONS[4:]
    return (*attention, *mlp)


def _split_parts(layer: int, projection: str, module: LoraModule, hf_config: Any
                 ) -> dict[tuple[int, str], LoraModule]:
    """The module as adapters of the projections the model keeps (a fused module's parts share its A)."""
    parts = FUSED_PROJECTIONS.get(projection)
    if parts is None:
        return {(layer, projection): module}
    rows = module.b.split([projection_shape(hf_config, part)[1] for part in parts])
    return {(layer, part): LoraModule(module.a, b, module.scaling) for part, b in zip(parts, rows)}


def module_name(layer: int, projection: str) -> str:
    """The projection's module name in the base model (peft's patterns match it; its tensors are
    ``base_model.model.<name>.lora_A.weight`` and ``...lora_B.weight``)."""
    block = "self_attn" if projection in (*PROJECTIONS[:4], "qkv_proj") else "mlp"
    return f"model.layers.{layer}.{block}.{projection}"


def projection_shape(hf_config: Any, projection: str) -> tuple[int, int]:
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
        "qkv_proj": (hidden, q_rows + 2 * kv_rows),
        "gate_up_proj": (hidden, 2 * intermediate),
    }[projection]
