"""The language model of a vision-language checkpoint, served for text (Gemma 3 4B and up, Mistral Small 3.1, Llama 4
Scout and Maverick, Qwen2-VL, Qwen2.5-VL, Qwen3-VL and Qwen3-VL-MoE).

Such a checkpoint nests its decoder's config as ``text_config`` and stores the decoder's tensors under
``language_model.`` beside a vision tower and a projector. Text prompts never reach those, so the decoder is served
alone: its config is the text config, its tensors are renamed to a text checkpoint's names, the vision tensors are
skipped. Images are not accepted (the API takes text). The Qwen VL models' multimodal RoPE gives a text token the
same temporal, height and width position, which turns every frequency by that one position: their language models
are Qwen2's and Qwen3's with plain RoPE."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch
    from transformers import PretrainedConfig

VISION_LANGUAGE_ARCHITECTURES = ("Gemma3ForConditionalGeneration", "Mistral3ForConditionalGeneration",
                                 "Llama4ForConditionalGeneration", "Qwen2VLForConditionalGeneration",
                                 "Qwen2_5_VLForConditionalGeneration", "Qwen3VLForConditionalGeneration",
                                 "Qwen3VLMoeForConditionalGeneration")
"""Checkpoints whose language model is served alone."""
_LANGUAGE_PREFIXES = (("language_model.model.", "model."), ("language_model.lm_head.", "lm_head."),
                      ("model.language_model.", "model."))
"""(checkpoint prefix, text checkpoint prefix): hub layouts (``language_model.model.``) and transformers 5's own."""
_VISION_PREFIXES = ("vision_tower.", "multi_modal_projector.", "model.vision_tower.", "model.multi_modal_projector.",
                    "vision_model.", "model.vision_model.", "visual.", "model.visual.")
"""The vision towers' and projectors' tensors (Llama 4 names its tower ``vision_model``, Qwen ``visual``)."""
_TEXT_FAMILIES = {"qwen2_vl_text": "qwen2", "qwen2_5_vl_text": "qwen2", "qwen3_vl_text": "qwen3",
                  "qwen3_vl_moe_text": "qwen3_moe"}
"""Text configs' model_types whose decoder is a text family's (see the module's docstring)."""


def is_vision_language(config: PretrainedConfig) -> bool:
    """Whether ``config`` is a vision-language checkpoint whose language model is served alone."""
    return any(name in VISION_LANGUAGE_ARCHITECTURES for name in getattr(config, "architectures", None) or [])


def is_vision_language_dir(directory: Path) -> bool:
    """is_vision_language of the config.json in ``directory`` (False without one)."""
    path = directory / "config.json"
    if not path.is_file():
        return False
    architectures = json.loads(path.read_text()).get("architectures") or []
    return any(name in VISION_LANGUAGE_ARCHITECTURES for name in architectures)


def language_model_config(config: PretrainedConfig) -> PretrainedConfig:
    """The config the decoder is built from: ``text_config`` (its architecture found from its model_type), with the
    checkpoint's embedding tying where the outer config sets it (HF ties the outer model's head by that)."""
    text = config.text_config
    text.architectures = None
    family = _TEXT_FAMILIES.get(getattr(text, "model_type", ""))
    if family is not None:
        text.model_type = family
    tie = getattr(config, "tie_word_embeddings", None)
    if tie is not None:
        text.tie_word_embeddings = bool(tie)
    return text


def language_model_tensors(tensors: Iterable[tuple[str, torch.Tensor]]) -> Iterator[tuple[str, torch.Tensor]]:
    """The decoder's tensors with a text checkpoint's names; the vision tower's and the projector's skipped."""
    for name, tensor in tensors:
        if name.startswith(_VISION_PREFIXES):
            continue
        for prefix, replacement in _LANGUAGE_PREFIXES:
            if name.startswith(prefix):
                name = replacement + name[len(prefix):]
                break
        yield name, tensor
