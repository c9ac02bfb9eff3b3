"""--attention-backend: what auto picks, and clear errors for the rest."""

from __future__ import annotations

import pytest
import torch

from executor_svc.attention.selection import build_attention_backend, is_graph_safe, resolve_backend_name
from executor_svc.config import ExecutorConfig


def test_auto_is_torch_on_the_cpu_and_triton_on_cuda_when_it_imports():
    assert resolve_backend_name("auto", torch.device("cpu")) == "torch"
    pytest.importorskip("triton")
    assert resolve_backend_name("auto", torch.device("cuda")) == "triton"


def test_explicit_names_build_their_backend():
    cpu = torch.device("cpu")
    assert build_attention_backend("torch", cpu).name == "torch"
    padded = build_attention_backend("torch_padded", cpu)
    assert padded.name == "torch_padded" and is_graph_safe(padded)
    assert not is_graph_safe(build_attention_backend("torch", cpu))


def test_unknown_names_are_refused_naming_the_field(tmp_path):
    with pytest.raises(ValueError, match="attention_backend"):
        build_attention_backend("flash", torch.device("cpu"))
    with pytest.raises(ValueError, match="attention_backend"):
        ExecutorConfig(model_dir=str(tmp_path), attention_backend="flash")
    with pytest.raises(ValueError, match="load_format"):
        ExecutorConfig(model_dir=str(tmp_path), load_format="npz")
    with pytest.raises(ValueError, match="max_num_seqs"):
        ExecutorConfig(model_dir=str(tmp_path), max_num_seqs=0)


def test_auto_dtype_is_bf16_on_cuda_and_fp32_on_the_cpu(tmp_path):
    assert ExecutorConfig(model_dir=str(tmp_path)).torch_dtype_name == "float32"
    assert ExecutorConfig(model_dir=str(tmp_path), device="cuda").torch_dtype_name == "bfloat16"
    assert ExecutorConfig(model_dir=str(tmp_path), device="cuda", dtype="float32").torch_dtype_name == "float32"
