"""Loading an HF checkpoint (safetensors, single or sharded, or a GGUF through transformers) into our model."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from executor_svc.attention.backend import AttentionBackend
from executor_svc.dummy_weights import init_dummy_weights
from executor_svc.models.cpu_matmul_plan import ROW_BUCKETS, add_plans_for, current_plans
from executor_svc.models.llama import LlamaModelForCausalLM
from executor_svc.models.llama_weights import load_weights
from executor_svc.models.quantized_weights import checkpoint_quantisation, dequantised
from executor_svc.models.registry import model_class_for
from executor_svc.models.vision_language import (
    is_vision_language,
    is_vision_language_dir,
    language_model_config,
    language_model_tensors,
)
from executor_svc.parallel.tensor_parallel import SINGLE, TensorParallel
from stepahead_common.cache_dir import stepahead_cache_dir

if TYPE_CHECKING:
    from transformers import PretrainedConfig

logger = logging.getLogger(__name__)
_SAFETENSORS_INDEX = "model.safetensors.index.json"


@dataclass(frozen=True)
class CheckpointFiles:
    """What a model path holds: a config directory plus safetensors files, or one GGUF file."""

    directory: Path
    safetensors: tuple[Path, ...] = ()
    gguf: Path | None = None


def find_checkpoint(model_path: str | Path) -> CheckpointFiles:
    """Resolve a directory (safetensors or GGUF inside) or a .gguf file; FileNotFoundError/ValueError name the path."""
    path = Path(model_path)
    if not path.exists():
        raise FileNotFoundError(f"model_dir: {path} does not exist")
    if path.is_file():
        if path.suffix != ".gguf":
            raise ValueError(f"model_dir: {path} is a file but not a .gguf")
        return CheckpointFiles(directory=path.parent, gguf=path)
    safetensors = _safetensors_files(path)
    if safetensors:
        if not (path / "config.json").is_file():
            raise FileNotFoundError(f"model_dir: {path / 'config.json'} is missing")
        return CheckpointFiles(directory=path, safetensors=safetensors)
    ggufs = sorted(path.glob("*.gguf"))
    if len(ggufs) > 1:
        raise ValueError(f"model_dir: {path} holds several .gguf files; pass one of them: {[g.name for g in ggufs]}")
    if ggufs:
        return CheckpointFiles(directory=path, gguf=ggufs[0])
    raise FileNotFoundError(f"model_dir: {path} holds no *.safetensors or *.gguf checkpoint")


def load_hf_config(model_dir: str | Path, load_format: str = "auto") -> PretrainedConfig:
    """The transformers config of a checkpoint directory or GGUF file (``dummy``: a directory's
    config.json, no weights needed); a vision-language checkpoint's text config (its language model is what is
    served: models/vision_language.py)."""
    from transformers import AutoConfig

    if load_format == "dummy" and (Path(model_dir) / "config.json").is_file():
        config = AutoConfig.from_pretrained(model_dir)
    else:
        files = find_checkpoint(model_dir)
        if files.gguf is not None:
            return AutoConfig.from_pretrained(files.directory, gguf_file=files.gguf.name)
        config = AutoConfig.from_pretrained(files.directory)
    return language_model_config(config) if is_vision_language(config) else config


def load_model(
    model_dir: str | Path,
    dtype: torch.dtype,
    device: torch.device | str,
    attention_backend: AttentionBackend,
    max_model_len: int | None = None,
    load_format: str = "auto",
    tp: TensorParallel = SINGLE,
    pack_cpu_weights: bool = True,
) -> LlamaModelForCausalLM:
    """Build the model for the checkpoint's architecture and load its weights, in `dtype` on `device`;
    under tensor parallelism, this rank's shard of them.

    ``load_format`` dummy: seeded random weights of the checkpoint's shape instead (see dummy_weights.py).
    ``pack_cpu_weights``: on the CPU in float32, also keep oneDNN-packed copies of the projections and the LM
    head for steps of 3+ tokens (LlamaModelForCausalLM.pack_cpu_weights; twice the weights' memory)."""
    if load_format not in ("auto", "dummy"):
        raise ValueError(f"load_format: must be auto or dummy, got {load_format!r}")
    if load_format == "dummy" and tp.enabled:
        raise ValueError("load_format: dummy weights are drawn per parameter shape, so shards would not match "
                         "one model; use a checkpoint with tensor_parallel_size > 1")
    config = load_hf_config(model_dir, load_format)
    model_class = model_class_for(config)
    files = find_checkpoint(model_dir) if load_format != "dummy" else None
    quantisation = checkpoint_quantisation(files.directory) if files is not None and files.gguf is None else None
    # Built on the meta device and materialised in the target dtype: no transient fp32 copy of the weights.
    with torch.device("meta"):
        model = model_class(config, attention_backend, max_model_len=max_model_len, tp=tp)
    model = model.to(dtype=dtype).to_empty(device=device)
    model.reset_rope_tables()
    if files is None:
        init_dummy_weights(model)
    else:
        tensors = _gguf_tensors(files.gguf) if files.gguf is not None else _safetensors_tensors(files.safetensors)
        if files.gguf is None and is_vision_language_dir(files.directory):
            tensors = language_model_tensors(tensors)
        load_weights(model, dequantised(tensors, quantisation))
    if pack_cpu_weights:
        model.pack_cpu_weights()
    if torch.device(device).type == "cpu" and dtype == torch.float32:
        _time_cpu_matmuls(model)
    return model.eval()


def _time_cpu_matmuls(model: torch.nn.Module) -> None:
    """Choose this process's CPU matmul per row count and projection shape by timing them (cpu_matmul_plan.py) on each
    distinct 2-D weight shape of the model (the embedding's stands for a tied LM head's), once per machine (cached)."""
    weights = [weight for weight in model.parameters() if weight.dim() == 2]
    add_plans_for(weights, stepahead_cache_dir() / "cpu_matmul")
    plans = current_plans().by_shape
    for shape in dict.fromkeys((weight.shape[0], weight.shape[1]) for weight in weights):
        plan = plans.get(shape)
        if plan is None:  # a weight that is not float32 on the CPU: never timed
            continue
        logger.info("CPU matmul for %s weights, per row count %s: %s (without a packed copy: %s)", shape,
                    ROW_BUCKETS, plan.choices, plan.unpacked_choices)


def _safetensors_files(directory: Path) -> tuple[Path, ...]:
    index = directory / _SAFETENSORS_INDEX
    if index.is_file():
        weight_map = json.loads(index.read_text())["weight_map"]
        files = tuple(directory / name for name in sorted(set(weight_map.values())))
        for file in files:
            if not file.is_file():
                raise FileNotFoundError(f"model_dir: {file} is listed in {index.name} but missing")
        return files
    return tuple(sorted(directory.glob("*.safetensors")))


def _safetensors_tensors(files: tuple[Path, ...]) -> Iterator[tuple[str, torch.Tensor]]:
    from safetensors import safe_open

    for file in files:
        with safe_open(str(file), framework="pt", device="cpu") as handle:
            for name in handle.keys():
                yield name, handle.get_tensor(name)


def _gguf_tensors(gguf: Path) -> Iterator[tuple[str, torch.Tensor]]:
    """Dequantised fp32 tensors of a GGUF, with HF names, through transformers' GGUF reader."""
    from transformers import AutoModelForCausalLM

    hf_model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    yield from hf_model.state_dict().items()
