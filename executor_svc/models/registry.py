"""Which model class serves which HF architecture."""

from __future__ import annotations

from typing import Any

from executor_svc.models.llama import LlamaModelForCausalLM

MODEL_CLASSES: dict[str, type] = {
    "LlamaForCausalLM": LlamaModelForCausalLM,
    "Qwen2ForCausalLM": LlamaModelForCausalLM,
    "Qwen3ForCausalLM": LlamaModelForCausalLM,
}


def model_class_for(config: Any) -> type:
    """The model class for config.architectures[0]; ValueError naming `architectures` when unsupported."""
    architectures = list(getattr(config, "architectures", None) or [])
    for architecture in architectures:
        if architecture in MODEL_CLASSES:
            return MODEL_CLASSES[architecture]
    raise ValueError(
        f"architectures: {architectures or 'none given'} not supported; supported: {sorted(MODEL_CLASSES)}"
    )
