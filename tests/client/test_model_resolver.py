"""Tests of client/model_resolver.py with the conversion subprocess replaced by a fake.

The real conversion is covered by tests/executor_svc/test_default_model.py (slow).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from client import model_resolver
from client.cache import CACHE_ENV_VAR
from client.model_resolver import (
    ModelResolutionError,
    default_model_name,
    is_complete_model_dir,
    resolve_model,
)

MODEL_FILES = ("config.json", "tokenizer.json", "model.safetensors")


def _write_model_dir(path: Path) -> None:
    path.mkdir(parents=True, exist_ok=True)
    for name in MODEL_FILES:
        (path / name).write_text("{}")


class FakeConverter:
    """Stands in for run_checked: records commands and writes a model dir at --out."""

    def __init__(self, fail: bool = False, racing_target: Path | None = None) -> None:
        self.commands: list[list[str]] = []
        self.fail = fail
        self.racing_target = racing_target

    def __call__(self, command: Sequence[str], description: str) -> None:
        self.commands.append(list(command))
        if self.fail:
            raise RuntimeError(f"{description} failed (exit code 2): error: no package")
        out = Path(command[command.index("--out") + 1])
        _write_model_dir(out)
        if self.racing_target is not None:  # another process finished first
            _write_model_dir(self.racing_target)


@pytest.fixture()
def converter(monkeypatch: pytest.MonkeyPatch) -> FakeConverter:
    fake = FakeConverter()
    monkeypatch.setattr(model_resolver, "run_checked", fake)
    return fake


def _leftovers(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.startswith("."))


def test_importing_the_client_side_does_not_load_torch() -> None:
    code = (
        "import sys, client, client.model_resolver, client.mtbench\n"
        "print(sorted(m for m in ('torch', 'transformers') if m in sys.modules))"
    )
    output = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert output.strip() == "[]"


def test_default_model_name() -> None:
    assert default_model_name() == "SmolLM2-135M-Instruct"


@pytest.mark.parametrize("spec", [None, "default"])
def test_default_model_is_converted_once(
    converter: FakeConverter, tmp_path: Path, spec: str | None
) -> None:
    expected = tmp_path / "models" / "SmolLM2-135M-Instruct"
    assert resolve_model(spec, cache_dir=tmp_path) == expected
    assert is_complete_model_dir(expected)
    (command,) = converter.commands
    assert command[:3] == [sys.executable, "-m", "executor_svc.default_model"]
    assert "--gguf" not in command
    assert Path(command[command.index("--out") + 1]).parent == expected.parent
    assert _leftovers(expected.parent) == []
    assert expected.stat().st_mode & 0o777 == 0o755
    assert resolve_model(spec, cache_dir=tmp_path) == expected
    assert len(converter.commands) == 1


def test_a_conversion_is_reported_to_progress(converter: FakeConverter, tmp_path: Path) -> None:
    reported: list[str] = []
    target = tmp_path / "models" / default_model_name()
    resolve_model(None, cache_dir=tmp_path, progress=reported.append)
    assert reported[0] == f"converting the default model {default_model_name()} into {target} (first use) ..."
    assert reported[1].startswith("model converted (") and reported[1].endswith(" s)")
    resolve_model(None, cache_dir=tmp_path, progress=reported.append)  # converted already: nothing to report
    assert len(reported) == 2


def test_cache_comes_from_the_environment_at_call_time(
    converter: FakeConverter, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(CACHE_ENV_VAR, str(tmp_path / "env-cache"))
    assert resolve_model(None) == tmp_path / "env-cache" / "models" / default_model_name()


def test_incomplete_default_dir_is_replaced(converter: FakeConverter, tmp_path: Path) -> None:
    target = tmp_path / "models" / default_model_name()
    target.mkdir(parents=True)
    (target / "config.json").write_text("{}")
    assert resolve_model(None, cache_dir=tmp_path) == target
    assert is_complete_model_dir(target)
    assert len(converter.commands) == 1


def test_failed_conversion_leaves_nothing_behind(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(model_resolver, "run_checked", FakeConverter(fail=True))
    with pytest.raises(ModelResolutionError, match="no package"):
        resolve_model(None, cache_dir=tmp_path)
    models = tmp_path / "models"
    assert list(models.iterdir()) == []


def test_a_concurrent_conversion_that_won_is_used(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    target = tmp_path / "models" / default_model_name()
    monkeypatch.setattr(model_resolver, "run_checked", FakeConverter(racing_target=target))
    assert resolve_model(None, cache_dir=tmp_path) == target
    assert _leftovers(target.parent) == []


def test_resolvers_at_the_same_time_convert_once(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    class SlowConverter(FakeConverter):
        def __call__(self, command: Sequence[str], description: str) -> None:
            time.sleep(0.3)  # long enough for the other resolver to arrive while this one converts
            super().__call__(command, description)

    slow = SlowConverter()
    monkeypatch.setattr(model_resolver, "run_checked", slow)
    with ThreadPoolExecutor(2) as pool:
        results = list(pool.map(lambda _: resolve_model(None, cache_dir=tmp_path), range(2)))
    assert results == [tmp_path / "models" / default_model_name()] * 2
    assert len(slow.commands) == 1
    assert is_complete_model_dir(results[0])


def test_gguf_file_is_converted_into_the_cache_by_name(
    converter: FakeConverter, tmp_path: Path
) -> None:
    gguf = tmp_path / "weights" / "Tiny-Q8_0.gguf"
    gguf.parent.mkdir()
    gguf.write_bytes(b"GGUF")
    resolved = resolve_model(str(gguf), cache_dir=tmp_path / "cache")
    assert resolved == tmp_path / "cache" / "models" / "gguf" / "Tiny-Q8_0"
    (command,) = converter.commands
    assert command[command.index("--gguf") + 1] == str(gguf.resolve())
    assert resolve_model(str(gguf), cache_dir=tmp_path / "cache") == resolved
    assert len(converter.commands) == 1


def test_local_dir_is_used_as_is(converter: FakeConverter, tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama"}))
    assert resolve_model(str(tmp_path)) == tmp_path.resolve()
    assert converter.commands == []


def test_local_dir_without_config_is_rejected(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=f"{tmp_path}.*config.json"):
        resolve_model(str(tmp_path))


def test_other_files_are_rejected(tmp_path: Path) -> None:
    weights = tmp_path / "model.bin"
    weights.write_bytes(b"")
    with pytest.raises(ValueError, match="not a .gguf"):
        resolve_model(str(weights))


@pytest.mark.parametrize("spec", ["./missing", "/no/such/dir", "~/no-such-xyz", "a/b/c", "m.gguf"])
def test_missing_paths_are_not_sent_to_the_hub(spec: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(model_resolver, "_download_from_hub", _must_not_be_called)
    with pytest.raises(ValueError, match="does not exist"):
        resolve_model(spec)


def _must_not_be_called(*args: object) -> None:
    raise AssertionError("hub download attempted for a path")


def test_hub_failure_names_the_id(monkeypatch: pytest.MonkeyPatch) -> None:
    import huggingface_hub

    def offline(**kwargs: object) -> str:
        raise OSError("Name or service not known")

    monkeypatch.setattr(huggingface_hub, "snapshot_download", offline)
    with pytest.raises(ModelResolutionError, match="'some-org/some-model'.*Name or service"):
        resolve_model("some-org/some-model")


def test_hub_download_returns_the_snapshot(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import huggingface_hub

    _write_model_dir(tmp_path / "snapshot")
    requested: list[object] = []

    def download(**kwargs: object) -> str:
        requested.append(kwargs["repo_id"])
        return str(tmp_path / "snapshot")

    monkeypatch.setattr(huggingface_hub, "snapshot_download", download)
    assert resolve_model("org/model") == (tmp_path / "snapshot").resolve()
    assert requested == ["org/model"]


def test_hub_offline_for_real(tmp_path: Path) -> None:
    code = (
        "from client.model_resolver import resolve_model, ModelResolutionError\n"
        "try:\n    resolve_model('stepahead-test/no-such-model')\n"
        "except ModelResolutionError as err:\n    print(err)\n"
    )
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path)}
    command = [sys.executable, "-c", code]
    result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=60)
    output = result.stdout
    assert "'stepahead-test/no-such-model'" in output
    assert "Hugging Face Hub" in output
