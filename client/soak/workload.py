"""The soak's load: concurrent workers sending random requests (lengths, sampling, structured output formats, allowed
token ids and bad words, prompt scoring, cancels, deadlines) and recording how each one ended; a constrained output
that ends with "stop" is checked against its format, and one with allowed token ids against them."""

from __future__ import annotations

import asyncio
import json
import random
import re
import time
from collections import Counter
from dataclasses import dataclass, field

import grpc

from client.async_client import AsyncClient
from client.errors import StepaheadError

SOAK_FORMATS: tuple[tuple[str, dict], ...] = (
    ("regex", {"regex": r"[0-9]{1,6}(-[a-z]{1,8})?!"}),
    ("choice", {"choice": ["yes", "no", "maybe later"]}),
    ("json_object", {"json_object": True}),
)
"""The structured output formats the soak draws (on a random-weight model: the mask does all the work)."""


@dataclass(frozen=True)
class SoakLoad:
    """Shape of the random requests."""

    concurrency: int = 8
    max_prompt_tokens: int = 200
    max_output_tokens: int = 128
    vocab_size: int = 400
    cancel_fraction: float = 0.1
    deadline_fraction: float = 0.1
    structured_fraction: float = 0.2
    """Requests constrained to one of SOAK_FORMATS."""
    scored_fraction: float = 0.1
    """Requests asking for prompt_logprobs (their prefill scores the prompt and takes no cached prefix)."""
    restricted_fraction: float = 0.1
    """Free-text requests with allowed_token_ids (their outputs checked to stay inside) or bad_words."""
    lora_fraction: float = 0.3
    """Requests naming one of the served LoRA adapters (when the server serves any)."""
    hang_s: float = 60.0
    """A stream with no message for this long counts as stalled; for 5x as long, as hung (and is cancelled)."""

    def __post_init__(self) -> None:
        for name in ("concurrency", "max_prompt_tokens", "max_output_tokens", "vocab_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}: must be >= 1, got {getattr(self, name)}")
        for name in ("cancel_fraction", "deadline_fraction", "structured_fraction", "scored_fraction",
                     "restricted_fraction", "lora_fraction"):
            if not 0 <= getattr(self, name) <= 1:
                raise ValueError(f"{name}: must be in [0, 1], got {getattr(self, name)}")
        if self.hang_s <= 0:
            raise ValueError(f"hang_s: must be > 0, got {self.hang_s}")


@dataclass
class SoakTally:
    """What happened to the requests sent so far."""

    outcomes: Counter[str] = field(default_factory=Counter)
    """"completed", "cancelled" (by the soak), "hung", or a gRPC status code name."""
    tokens: int = 0
    hung_streams: int = 0
    stalled_streams: int = 0
    """Streams silent for longer than hang_s that went on afterwards (starved, e.g. preempted and requeued)."""
    max_silence_s: float = 0.0
    constrained: Counter[str] = field(default_factory=Counter)
    """Constrained requests that ended with "stop", by format: their text checked against it."""
    format_mismatches: list[str] = field(default_factory=list)
    """Such texts that did not match their format, and outputs with a token outside allowed_token_ids (none
    expected)."""
    lora: Counter[str] = field(default_factory=Counter)
    """Requests sent with a LoRA adapter ("requests"), and the adapter churn's "loads", "unloads",
    "unloads_refused" (in use, or the executor away) and "changes_refused" (load refusals)."""


class SoakWorkers:
    """``concurrency`` workers looping until ``stop_at`` (monotonic)."""

    def __init__(self, address: str, load: SoakLoad, seed: int, adapters: list[str] | None = None) -> None:
        """``adapters``: the served LoRA adapters requests may name (a list the adapter churn keeps current)."""
        self.address = address
        self.load = load
        self.random = random.Random(seed)
        self.tally = SoakTally()
        self.adapters = adapters if adapters is not None else []

    async def run(self, stop_at: float) -> SoakTally:
        async with AsyncClient(self.address) as client:
            await asyncio.gather(*(self._worker(client, stop_at) for _ in range(self.load.concurrency)))
        return self.tally

    async def _worker(self, client: AsyncClient, stop_at: float) -> None:
        while time.monotonic() < stop_at:
            outcome = await self._one(client)
            self.tally.outcomes[outcome] += 1

    def _params(self) -> tuple[dict, int | None, float | None]:
        load, rnd = self.load, self.random
        prompt = [rnd.randrange(3, load.vocab_size) for _ in range(rnd.randint(1, load.max_prompt_tokens))]
        params: dict = {"token_ids": prompt, "max_tokens": rnd.randint(1, load.max_output_tokens),
                        "ignore_eos": rnd.random() < 0.5}
        if rnd.random() < 0.5:
            params.update(temperature=0.0)
        else:
            params.update(temperature=rnd.uniform(0.1, 1.5), top_p=rnd.uniform(0.5, 1.0), seed=rnd.randrange(2**32))
        if rnd.random() < load.structured_fraction:
            params.update(rnd.choice(SOAK_FORMATS)[1])
        elif rnd.random() < load.restricted_fraction:
            params.update(self._restriction())
        if rnd.random() < load.scored_fraction:
            params.update(prompt_logprobs=rnd.randint(0, 2))
        if self.adapters and rnd.random() < load.lora_fraction:
            params.update(model=rnd.choice(self.adapters))
            self.tally.lora["requests"] += 1
        cancel_after = rnd.randint(1, 8) if rnd.random() < load.cancel_fraction else None
        deadline = rnd.uniform(0.05, 2.0) if rnd.random() < load.deadline_fraction else None
        return params, cancel_after, deadline

    def _restriction(self) -> dict:
        """allowed_token_ids (some tokens, EOS among them half the time) or a few short bad words."""
        rnd, vocab_size = self.random, self.load.vocab_size
        if rnd.random() < 0.5:
            allowed = rnd.sample(range(vocab_size), rnd.randint(1, min(64, vocab_size)))
            return {"allowed_token_ids": allowed + ([0, 2] if rnd.random() < 0.5 else [])}
        return {"bad_words": [rnd.choice(["a", "the", " is", "of the", "!", "0", "x y z"]) for _ in range(3)]}

    async def _one(self, client: AsyncClient) -> str:
        params, cancel_after, deadline = self._params()
        stream = client.generate_stream(**params, timeout=deadline)
        chunks, stalled, finish_reason = 0, False, ""
        text: list[str] = []
        token_ids: list[int] = []
        try:
            while True:
                waited_from = time.monotonic()
                try:
                    chunk = await asyncio.wait_for(stream.__anext__(), timeout=5 * self.load.hang_s)
                except StopAsyncIteration:
                    self._check_format(params, "".join(text), finish_reason)
                    self._check_allowed(params, token_ids)
                    return "completed"
                except asyncio.TimeoutError:
                    self.tally.hung_streams += 1
                    return "hung"
                finally:
                    silence = time.monotonic() - waited_from
                    self.tally.max_silence_s = max(self.tally.max_silence_s, silence)
                    if silence > self.load.hang_s and not stalled:
                        stalled = True
                        self.tally.stalled_streams += 1
                chunks += 1
                self.tally.tokens += len(chunk.token_ids)
                text.append(chunk.text)
                token_ids += chunk.token_ids
                finish_reason = chunk.finish_reason or finish_reason
                if cancel_after is not None and chunks >= cancel_after:
                    return "cancelled"
        except StepaheadError as error:
            gone = ("LoRA adapter" in str(error) or "unknown model" in str(error)) and params.get("model")
            if error.code == grpc.StatusCode.INVALID_ARGUMENT and gone:
                return "ADAPTER_UNLOADED"  # the churn unloaded it between the choice and the request
            return error.code.name if isinstance(error.code, grpc.StatusCode) else type(error).__name__
        finally:
            stream.cancel()

    def _check_format(self, params: dict, text: str, finish_reason: str) -> None:
        """A constrained request that stopped on its own (EOS once the format was complete) holds its format."""
        kind = next((name for name, fields in SOAK_FORMATS if set(fields) <= set(params)), None)
        if kind is None or finish_reason != "stop" or params.get("ignore_eos"):
            return
        self.tally.constrained[kind] += 1
        if not _matches(kind, params, text):
            self.tally.format_mismatches.append(f"{kind}: {text!r}")


    def _check_allowed(self, params: dict, token_ids: list[int]) -> None:
        """Every token of a request with allowed_token_ids is one of them."""
        allowed = params.get("allowed_token_ids")
        if allowed is None:
            return
        self.tally.constrained["allowed_token_ids"] += 1
        outside = sorted(set(token_ids) - set(allowed))
        if outside:
            self.tally.format_mismatches.append(f"allowed_token_ids: generated {outside}")


def _matches(kind: str, params: dict, text: str) -> bool:
    if kind == "regex":
        return re.fullmatch(params["regex"], text) is not None
    if kind == "choice":
        return text in params["choice"]
    try:
        return isinstance(json.loads(text), dict)
    except ValueError:
        return False
