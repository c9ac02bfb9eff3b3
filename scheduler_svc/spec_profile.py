"""The step profile dynamic speculative decoding plans with: measured by the executor's Profile RPC,
cached on disk under a key of everything it depends on, re-measured when that key changes.

A cache file holds {"key": ..., "profile": StepTimeProfile.to_dict(), "profile_s": ...}; it is used only
when its key equals the key of the running executor and grid, so a profile of other weights, another
drafter, dtype, device, thread count, K_max or batch grid is never used, only replaced.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from scheduler_svc.dynamic_k import StepTimeProfile
from scheduler_svc.tokenizer import Tokenizer
from stepahead_common.cache_lock import cache_entry_lock
from stepahead_common.stdlib_prompts import calibration_prompts
from stepahead_proto import executor_pb2, executor_pb2_grpc

logger = logging.getLogger(__name__)

PROFILE_FORMAT = 4
"""Bump when the measurement changes meaning: every cached profile becomes stale."""
CONTEXT_LEN = 32
CALIBRATION_TOKENS = 32
NUM_CALIBRATION_PROMPTS = 16
MAX_CALIBRATION_PROMPT = 128
"""Calibration prompts are cut to this many tokens (their prefill is a large share of a profile's time)."""


@dataclass(frozen=True)
class ProfileKey:
    """Everything a step profile depends on."""

    model: str
    model_fingerprint: str
    spec_method: str
    dtype: str
    device: str
    num_threads: int
    max_num_spec_tokens: int
    batch_sizes: tuple[int, ...]
    profile_format: int = PROFILE_FORMAT

    @classmethod
    def of(cls, description: executor_pb2.ExecutorDescription, batch_sizes: tuple[int, ...]) -> ProfileKey:
        """The key of a profile of this executor over ``batch_sizes``."""
        return cls(description.model, description.model_fingerprint, description.spec_method, description.dtype,
                   description.device, description.num_threads, description.max_num_spec_tokens, batch_sizes)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "batch_sizes": list(self.batch_sizes)}

    def file_name(self) -> str:
        """A file name unique to the key."""
        digest = hashlib.sha256(json.dumps(self.to_dict(), sort_keys=True).encode()).hexdigest()[:16]
        return f"profile-{digest}.json"


def batch_grid(max_num_seqs: int) -> tuple[int, ...]:
    """Decode batch sizes to profile: powers of two below max_num_seqs, and max_num_seqs itself."""
    if max_num_seqs < 1:
        raise ValueError(f"max_num_seqs: must be >= 1, got {max_num_seqs}")
    sizes = []
    size = 1
    while size < max_num_seqs:
        sizes.append(size)
        size *= 2
    return (*sizes, max_num_seqs)


def profile_document(key: ProfileKey, profile: StepTimeProfile, profile_s: float) -> dict[str, Any]:
    """The JSON document of a profile."""
    return {"key": key.to_dict(), "profile": profile.to_dict(), "profile_s": round(profile_s, 3)}


def load_cached(path: Path, key: ProfileKey) -> StepTimeProfile | None:
    """The profile at ``path`` if it was measured under ``key``; None (and why, logged) otherwise."""
    if not path.exists():
        return None
    try:
        document = json.loads(path.read_text())
        if document.get("key") != key.to_dict():
            logger.warning("step profile %s was measured for %s, not %s: re-profiling", path,
                           document.get("key"), key.to_dict())
            return None
        return StepTimeProfile.from_dict(document["profile"])
    except (OSError, ValueError, KeyError, TypeError) as error:
        logger.warning("step profile %s is unreadable (%s): re-profiling", path, error)
        return None


def write_document(path: Path, document: dict[str, Any]) -> None:
    """Write atomically (a crash leaves the old file or none, never half of one)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
    with os.fdopen(handle, "w") as stream:
        json.dump(document, stream, indent=2)
    os.replace(temporary, path)


def calibration_token_ids(tokenizer: Tokenizer, vocab_size: int, max_len: int) -> list[list[int]]:
    """The calibration prompts (stdlib docstrings, never the benchmark's) as chat prompts, truncated."""
    prompts = []
    for text in calibration_prompts(NUM_CALIBRATION_PROMPTS):
        messages = [{"role": "user", "content": text}]
        ids = tokenizer.apply_chat_template(messages) if tokenizer.chat_template else tokenizer.encode(text)
        ids = [token for token in ids if 0 <= token < vocab_size][:max_len]
        if ids:
            prompts.append(ids)
    return prompts


def profile_request(
    tokenizer: Tokenizer, description: executor_pb2.ExecutorDescription, batch_sizes: tuple[int, ...]
) -> executor_pb2.ProfileRequest:
    """The ProfileRequest for this executor: the grid, the context and the calibration prompts."""
    max_prompt = max(1, min(MAX_CALIBRATION_PROMPT, description.max_model_len // 4))
    # repeats left 0: the executor's own number of timing cycles (step_profile.MAX_CYCLES).
    request = executor_pb2.ProfileRequest(batch_sizes=batch_sizes, context_len=min(CONTEXT_LEN, max_prompt),
                                          calibration_max_tokens=CALIBRATION_TOKENS)
    for ids in calibration_token_ids(tokenizer, description.vocab_size, max_prompt):
        request.calibration_prompts.add(ids=ids)
    return request


def from_proto(message: executor_pb2.StepProfile) -> StepTimeProfile:
    """A StepTimeProfile from the Profile RPC's answer (validated)."""
    return StepTimeProfile(tuple(message.batch_sizes), tuple(tuple(row.step_ms) for row in message.rows),
                           tuple(message.acceptance_prior))


async def measure(
    stub: executor_pb2_grpc.ExecutorStub, tokenizer: Tokenizer, description: executor_pb2.ExecutorDescription,
    batch_sizes: tuple[int, ...],
) -> dict[str, Any]:
    """Profile the executor now; returns the profile's JSON document."""
    reply = await stub.Profile(profile_request(tokenizer, description, batch_sizes))
    key = ProfileKey.of(description, batch_sizes)
    return profile_document(key, from_proto(reply), reply.profile_s)


async def cached_or_measured(
    stub: executor_pb2_grpc.ExecutorStub, tokenizer: Tokenizer, description: executor_pb2.ExecutorDescription,
    batch_sizes: tuple[int, ...], cache_dir: Path,
) -> StepTimeProfile:
    """The cached profile of this executor and grid, else a new measurement (then cached). Schedulers starting
    at once with the same key measure once: the others wait for that profile instead of timing a busy machine."""
    key = ProfileKey.of(description, batch_sizes)
    path = cache_dir / key.file_name()
    lock = cache_entry_lock(path)
    await asyncio.to_thread(lock.acquire)
    try:
        cached = load_cached(path, key)
        if cached is not None:
            logger.info("step profile from %s", path)
            return cached
        logger.info("profiling the executor (batch sizes %s, K 0..%d) for %s", list(batch_sizes),
                    description.max_num_spec_tokens, path)  # `serve` relays this line (client/startup_progress.py)
        document = await measure(stub, tokenizer, description, batch_sizes)
        write_document(path, document)
    finally:
        lock.release()
    logger.info("step profile measured in %.1f s, cached in %s", document["profile_s"], path)
    return StepTimeProfile.from_dict(document["profile"])
