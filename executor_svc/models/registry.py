"""Which model class serves which HF architecture."""

from __future__ import annotations

from typing import TYPE_CHECKING

from executor_svc.models.llama import LlamaModelForCausalLM
from executor_svc.models.vision_language import VISION_LANGUAGE_ARCHITECTURES

if TYPE_CHECKING:
    from transformers import PretrainedConfig

MODEL_CLASSES: dict[str, type] = {
    architecture: LlamaModelForCausalLM
    for architecture in ("LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM",
                         "Phi3ForCausalLM", "GemmaForCausalLM", "Gemma2ForCausalLM",
                         "Gemma3ForCausalLM", "GraniteForCausalLM", "MixtralForCausalLM", "Qwen2MoeForCausalLM",
                         "Qwen3MoeForCausalLM", "GraniteMoeForCausalLM", "GraniteMoeSharedForCausalLM",
                         "Olmo2ForCausalLM", "Olmo3ForCausalLM", "OlmoeForCausalLM", "SmolLM3ForCausalLM",
                         "MinistralForCausalLM", "GlmForCausalLM", "Glm4ForCausalLM", "CohereForCausalLM",
                         "Cohere2ForCausalLM", "PhiForCausalLM", "Starcoder2ForCausalLM", "NemotronForCausalLM",
                         "ArceeForCausalLM", "Exaone4ForCausalLM", "Glm4MoeForCausalLM", "Dots1ForCausalLM",
                         "DeepseekV2ForCausalLM", "DeepseekV3ForCausalLM", "Glm4MoeLiteForCausalLM",
                         "SeedOssForCausalLM", "Ernie4_5ForCausalLM", "HunYuanDenseV1ForCausalLM",
                         "Ernie4_5_MoeForCausalLM", "GptOssForCausalLM", "Llama4ForCausalLM", "Ministral3ForCausalLM",
                         "HunYuanMoEV1ForCausalLM", "MiniMaxM2ForCausalLM", "FlexOlmoForCausalLM",
                         "Mistral4ForCausalLM", "ApertusForCausalLM",
                         *VISION_LANGUAGE_ARCHITECTURES)
}
"""Vision-language architectures are served as their language model (models/vision_language.py)."""

# Configs read from a GGUF name a model_type but no architectures.
_MODEL_TYPES: dict[str, str] = {"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM", "qwen3": "Qwen3ForCausalLM",
                                "mistral": "MistralForCausalLM", "phi3": "Phi3ForCausalLM",
                                "gemma": "GemmaForCausalLM", "gemma2": "Gemma2ForCausalLM",
                                "gemma3_text": "Gemma3ForCausalLM",
                                "granite": "GraniteForCausalLM", "mixtral": "MixtralForCausalLM",
                                "qwen2_moe": "Qwen2MoeForCausalLM", "qwen3_moe": "Qwen3MoeForCausalLM",
                                "granitemoe": "GraniteMoeForCausalLM",
                                "granitemoeshared": "GraniteMoeSharedForCausalLM", "olmo2": "Olmo2ForCausalLM",
                                "olmo3": "Olmo3ForCausalLM", "olmoe": "OlmoeForCausalLM",
                                "smollm3": "SmolLM3ForCausalLM", "ministral": "MinistralForCausalLM",
                                "glm": "GlmForCausalLM", "glm4": "Glm4ForCausalLM", "cohere": "CohereForCausalLM",
                                "cohere2": "Cohere2ForCausalLM", "phi": "PhiForCausalLM",
                                "starcoder2": "Starcoder2ForCausalLM", "nemotron": "NemotronForCausalLM",
                                "arcee": "ArceeForCausalLM", "exaone4": "Exaone4ForCausalLM",
                                "glm4_moe": "Glm4MoeForCausalLM", "dots1": "Dots1ForCausalLM",
                                "deepseek_v2": "DeepseekV2ForCausalLM", "deepseek_v3": "DeepseekV3ForCausalLM",
                                "glm4_moe_lite": "Glm4MoeLiteForCausalLM", "seed_oss": "SeedOssForCausalLM",
                                "ernie4_5": "Ernie4_5ForCausalLM", "hunyuan_v1_dense": "HunYuanDenseV1ForCausalLM",
                                "ernie4_5_moe": "Ernie4_5_MoeForCausalLM", "gpt_oss": "GptOssForCausalLM",
                                "llama4_text": "Llama4ForCausalLM", "ministral3": "Ministral3ForCausalLM",
                                "hunyuan_v1_moe": "HunYuanMoEV1ForCausalLM", "minimax_m2": "MiniMaxM2ForCausalLM",
                                "flex_olmo": "FlexOlmoForCausalLM", "mistral4": "Mistral4ForCausalLM",
                                "apertus": "ApertusForCausalLM"}


def model_class_for(config: PretrainedConfig) -> type:
    """The model class for config.architectures (or, when absent, config.model_type).

    Raises ValueError naming `architectures` when none is supported.
    """
    architectures = list(getattr(config, "architectures", None) or [])
    if not architectures and getattr(config, "model_type", None) in _MODEL_TYPES:
        architectures = [_MODEL_TYPES[config.model_type]]
    for architecture in architectures:
        if architecture in MODEL_CLASSES:
            return MODEL_CLASSES[architecture]
    raise ValueError(
        f"architectures: {architectures or 'none given'} not supported; supported: {sorted(MODEL_CLASSES)}"
    )
