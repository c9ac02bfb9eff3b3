"""Turning a model spec (None, "default", a directory, a .gguf file, a hub id) into a local dir.

Torch-free on purpose: the scheduler imports it. Conversions run in a subprocess
(`python -m executor_svc.default_model`) so torch and transformers never load in the caller.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from client.cache import stepahead_cache_dir
from client.subprocess_runner import run_checked
from stepahead_common.cache_lock import cache_entry_lock

_DEFAULT_MODEL_NAME = "SmolLM2-135M-Instruct"
_DEFAULT_SPECS = (None, "default")
_HUB_FILE_PATTERNS = ["*.json", "*.safetensors", "*.jinja", "tokenizer.model", "*.txt"]


class ModelResolutionError(RuntimeError):
    """A model could not be fetched or converted."""


def default_model_name() -> str:
    """Name of the model served when none is given."""
    return _DEFAULT_MODEL_NAME


def resolve_model(spec: str | None, cache_dir: Path | None = None,
                  progress: Callable[[str], None] | None = None) -> Path:
    """Return a local HF model directory (config.json, safetensors, tokenizer) for `spec`.

    - None or "default": the default model, converted once into `<cache>/models/<name>`;
    - an existing directory: itself (it must hold config.json);
    - a .gguf file: converted once into `<cache>/models/gguf/<file stem>`;
    - anything else: a Hugging Face Hub id, downloaded with huggingface_hub.

    `cache_dir` defaults to $STEPAHEAD_CACHE or ~/.cache/stepahead (read at call time). `progress`, if given,
    is told when a conversion starts and ends (`stepahead serve` reports it on stderr).

    Raises:
        ValueError: a path that does not exist, a directory without config.json, or a file
            that is not a .gguf.
        ModelResolutionError: conversion or download failed.
    """
    if spec in _DEFAULT_SPECS:
        return ensure_default_model(cache_dir, progress)
    path = Path(spec).expanduser()
    if path.is_dir():
        return _checked_local_dir(path)
    if path.is_file():
        if path.suffix.lower() != ".gguf":
            raise ValueError(f"model file {path} is not a .gguf file; pass a model directory")
        return ensure_converted_gguf(path, cache_dir, progress)
    if _looks_like_path(spec):
        raise ValueError(f"model path {path} does not exist")
    return _download_from_hub(spec)


def ensure_default_model(cache_dir: Path | None = None, progress: Callable[[str], None] | None = None) -> Path:
    """The default model's converted directory, converting it first if it is missing."""
    target = stepahead_cache_dir(cache_dir) / "models" / _DEFAULT_MODEL_NAME
    if not is_complete_model_dir(target):
        _convert_once(target, gguf_file=None, progress=progress)
    return target


def ensure_converted_gguf(gguf_file: Path, cache_dir: Path | None = None,
                          progress: Callable[[str], None] | None = None) -> Path:
    """The converted directory of a .gguf file (keyed by its file name), converting if needed."""
    target = stepahead_cache_dir(cache_dir) / "models" / "gguf" / gguf_file.stem
    if not is_complete_model_dir(target):
        _convert_once(target, gguf_file=gguf_file.resolve(), progress=progress)
    return target


def is_complete_model_dir(path: Path) -> bool:
    """True when `path` holds a config, safetensors weights and a tokenizer."""
    has_weights = (path / "model.safetensors").is_file() or (
        path / "model.safetensors.index.json"
    ).is_file()
    return (path / "config.json").is_file() and (path / "tokenizer.json").is_file() and has_weights


def _checked_local_dir(path: Path) -> Path:
    if not (path / "config.json").is_file():
        raise ValueError(f"model directory {path} has no config.json")
    return path.resolve()


def _looks_like_path(spec: str) -> bool:
    """Hub ids are "name" or "org/name"; anything else that is not found locally is a bad path."""
    return (
        spec.startswith(("/", ".", "~"))
        or spec.lower().endswith(".gguf")
        or spec.count("/") > 1
        or (os.sep != "/" and os.sep in spec)
    )


def _convert_once(target: Path, gguf_file: Path | None, progress: Callable[[str], None] | None = None) -> None:
    """Convert unless another process did while this one waited: processes resolving the same target at once
    (two servers, parallel test workers) run one conversion, and none deletes a directory another published."""
    with cache_entry_lock(target):
        if not is_complete_model_dir(target):
            started = time.monotonic()
            if progress is not None:
                progress(f"converting {_source(gguf_file)} into {target} (first use) ...")
            _convert_atomically(target, gguf_file)
            if progress is not None:
                progress(f"model converted ({time.monotonic() - started:.1f} s)")


def _source(gguf_file: Path | None) -> str:
    """What a conversion converts, in words."""
    return str(gguf_file) if gguf_file is not None else f"the default model {_DEFAULT_MODEL_NAME}"


def _convert_atomically(target: Path, gguf_file: Path | None) -> None:
    """Convert into a temporary sibling directory, then rename it to `target`."""
    target.parent.mkdir(parents=True, exist_ok=True)
    if target.exists():
        shutil.rmtree(target)  # an incomplete leftover; renames below never leave one
    scratch = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    scratch.chmod(0o755)  # mkdtemp makes it private; the cache may be shared
    command = [sys.executable, "-m", "executor_svc.default_model", "--out", str(scratch)]
    if gguf_file is not None:
        command += ["--gguf", str(gguf_file)]
    try:
        try:
            run_checked(command, f"converting {_source(gguf_file)} to {target}")
        except RuntimeError as err:
            raise ModelResolutionError(str(err)) from err
        _publish(scratch, target)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _publish(scratch: Path, target: Path) -> None:
    try:
        scratch.rename(target)
    except OSError:
        if not is_complete_model_dir(target):  # else a concurrent resolver got there first
            raise


def _download_from_hub(repo_id: str) -> Path:
    advice = "pass a local HF model directory or a .gguf file instead"
    try:
        from huggingface_hub import snapshot_download
    except ImportError as err:
        raise ModelResolutionError(
            f"cannot fetch model {repo_id!r}: huggingface_hub is not installed; {advice}"
        ) from err
    try:
        path = Path(snapshot_download(repo_id=repo_id, allow_patterns=_HUB_FILE_PATTERNS))
    except Exception as err:  # network, auth, bad id: all mean "not available here"
        raise ModelResolutionError(
            f"cannot fetch model {repo_id!r} from the Hugging Face Hub ({err}); {advice}"
        ) from err
    return _checked_local_dir(path)
