"""Default sampling parameters from the model's generation_config.json, as vLLM applies them (--generation-config).

A model's authors often ship recommended sampling settings (Qwen2.5: temperature 0.7, top_p 0.8, top_k 20,
repetition_penalty 1.05; Llama 3.1: temperature 0.6, top_p 0.9). vLLM uses them for every parameter a request leaves
unset, and so does the scheduler: temperature, top_p, top_k, min_p, repetition_penalty, and max_new_tokens as the
default max_tokens. Other keys (do_sample, bos/eos ids, ...) are not sampling defaults here, as in vLLM.
"""

from __future__ import annotations

import functools
import json
import math
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from stepahead_proto import sampling_pb2

FILE_NAME = "generation_config.json"


@dataclass(frozen=True)
class GenerationDefaults:
    """Sampling values for the fields a request leaves unset (None: the API's own default)."""

    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    """-1 disables top-k (a file's 0 is read as -1, as HF and vLLM mean it)."""
    min_p: float | None = None
    repetition_penalty: float | None = None
    max_new_tokens: int | None = None
    """The default max_tokens (capped at the room the context leaves)."""

    def __post_init__(self) -> None:
        def check(name: str, ok: bool, rule: str) -> None:
            value = getattr(self, name)
            if value is not None and not ok:
                raise ValueError(f"{FILE_NAME}: {name} {rule}, got {value!r}")

        check("temperature", self.temperature is None or (math.isfinite(self.temperature) and self.temperature >= 0),
              "must be a number >= 0")
        check("top_p", self.top_p is None or 0 < self.top_p <= 1, "must be in (0, 1]")
        check("top_k", self.top_k is None or self.top_k == -1 or self.top_k >= 1, "must be -1 or >= 1")
        check("min_p", self.min_p is None or 0 <= self.min_p <= 1, "must be in [0, 1]")
        check("repetition_penalty", self.repetition_penalty is None or (
            math.isfinite(self.repetition_penalty) and self.repetition_penalty > 0), "must be a number > 0")
        check("max_new_tokens", self.max_new_tokens is None or self.max_new_tokens >= 1, "must be >= 1")

    @classmethod
    def load(cls, setting: str, model_dir: str) -> GenerationDefaults:
        """The defaults ``setting`` names: "auto" (the model directory's file), "none" (no defaults) or a directory
        holding a generation_config.json. A missing file gives none; a malformed one a ValueError naming it."""
        if setting == "none":
            return cls()
        path = Path(model_dir if setting == "auto" else setting) / FILE_NAME
        if not path.is_file():
            return cls()
        try:
            raw = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, ValueError) as error:
            raise ValueError(f"{path}: cannot be read as JSON ({error})") from None
        if not isinstance(raw, dict):
            raise ValueError(f"{path}: must hold a JSON object")
        return cls.from_mapping(raw)

    @classmethod
    def from_mapping(cls, raw: dict[str, Any]) -> GenerationDefaults:
        """The sampling keys of a generation config's object; ValueError naming a key of the wrong type or range."""
        values: dict[str, Any] = {}
        for item in fields(cls):
            value = raw.get(item.name)
            if value is None:
                continue
            integral = item.name in ("top_k", "max_new_tokens")
            if isinstance(value, bool) or not isinstance(value, int if integral else (int, float)):
                raise ValueError(f"{FILE_NAME}: {item.name} must be {'an integer' if integral else 'a number'}, "
                                 f"got {value!r}")
            values[item.name] = -1 if item.name == "top_k" and value == 0 else value
        return cls(**values)

    @functools.cached_property
    def sampling_values(self) -> dict[str, float | int]:
        """The sampling fields this sets (max_new_tokens aside)."""
        return {item.name: getattr(self, item.name) for item in fields(self)
                if item.name != "max_new_tokens" and getattr(self, item.name) is not None}

    def apply(self, sampling: sampling_pb2.SamplingParams) -> sampling_pb2.SamplingParams:
        """``sampling`` with every field it leaves unset and this sets filled in (the same message when none is)."""
        unset = {name: value for name, value in self.sampling_values.items() if not sampling.HasField(name)}
        if not unset:
            return sampling
        filled = sampling_pb2.SamplingParams()
        filled.CopyFrom(sampling)
        for name, value in unset.items():
            setattr(filled, name, value)
        return filled
