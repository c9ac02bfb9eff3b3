"""Configuration of the scheduler service."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from scheduler_svc.api_keys import read_api_key_file
from stepahead_common.tls import check_pair, check_pem_file

DEFAULT_PORT = 50051
"""Where the public API listens unless told otherwise (and where the CLI's clients look for it)."""
SCHEDULING_POLICIES = ("fcfs", "priority")
"""--scheduling-policy: the order requests start in and the order they are preempted in."""
TOOL_CALL_PARSERS = ("hermes", "llama3_json", "pythonic", "mistral", "openai")
"""The tool call syntaxes the HTTP front can read from free text (tool_choice "auto"): --tool-call-parser."""
REASONING_PARSERS = ("deepseek_r1", "qwen3", "openai_gptoss")
"""How a reasoning model's thinking is marked, which the engine splits from the answer: a <think> block the
template or the model opens, or gpt-oss's harmony channels (--reasoning-parser; scheduler_svc/reasoning/)."""


_ORIGIN = re.compile(r"https?://[^/\s:?#]+(:\d{1,5})?")
"""A web origin: scheme, host and port, as a browser sends it in its Origin header."""


def _is_template_text(value: str) -> bool:
    """Whether a --chat-template value is the template itself rather than a file's path."""
    return "{{" in value or "{%" in value


def _require(condition: bool, field_name: str, message: str) -> None:
    if not condition:
        raise ValueError(f"{field_name}: {message}")


DEFAULT_RESPONSES_STORE_SIZE = 256
"""Stored Responses API responses unless --responses-store-size says otherwise."""


@dataclass(frozen=True)
class SchedulingConfig:
    """Limits of continuous batching: how much work one step may hold."""

    max_num_seqs: int = 64
    """Most requests running at once."""
    max_num_batched_tokens: int = 512
    """Token budget of one step (prefill chunks + decode tokens)."""
    max_inflight_steps: int = 2
    """StepRequests outstanding on the Execute stream (1 = synchronous)."""
    num_scheduler_steps: int = 1
    """Decode sub-steps per StepRequest when every scheduled request only decodes (multi-step)."""
    max_queued_requests: int = 1024
    """Most requests waiting to start; a new one beyond it is refused (RESOURCE_EXHAUSTED)."""
    max_queue_wait_s: float | None = None
    """A request still waiting to start after this long ends with RESOURCE_EXHAUSTED (None: no limit)."""
    stream_interval: int = 1
    """Tokens per streamed message after a request's first (the last carries what remains): fewer, larger
    messages when the scheduler's sends are the limit (high concurrency)."""
    enable_prefix_caching: bool = True
    """Reuse the KV blocks of a prefix (whole blocks of the same tokens from the start) computed before."""
    scheduling_policy: str = "fcfs"
    """One of SCHEDULING_POLICIES: "fcfs" (first come, first served; requests' priority must be 0) or "priority"
    (GenerateRequest.priority orders the queue and chooses whom to preempt)."""

    def __post_init__(self) -> None:
        _require(self.scheduling_policy in SCHEDULING_POLICIES, "scheduling_policy",
                 f"must be one of {', '.join(SCHEDULING_POLICIES)}, got {self.scheduling_policy!r}")
        for name in ("max_num_seqs", "max_num_batched_tokens", "max_inflight_steps", "num_scheduler_steps",
                     "max_queued_requests", "stream_interval"):
            value = getattr(self, name)
            _require(value >= 1, name, f"must be >= 1, got {value}")
        _require(
            self.max_queue_wait_s is None or self.max_queue_wait_s > 0,
            "max_queue_wait_s",
            f"must be > 0, got {self.max_queue_wait_s}",
        )


@dataclass(frozen=True)
class ReadinessConfig:
    """How the scheduler decides it is ready: its executor answers health checks and makes progress."""

    executor_stall_timeout_s: float = 5.0
    """Not ready when no step result arrived for this long while requests are queued or running."""
    poll_interval_s: float = 0.5
    """How often the executor's readiness and step progress are checked."""
    check_timeout_s: float = 1.0
    """Deadline of one health Check to the executor (a stopped process never answers)."""

    def __post_init__(self) -> None:
        for name in ("executor_stall_timeout_s", "poll_interval_s", "check_timeout_s"):
            value = getattr(self, name)
            _require(value > 0, name, f"must be > 0, got {value}")


@dataclass(frozen=True)
class SchedulerServiceConfig:
    """Everything the scheduler process needs to start."""

    model_dir: str
    """HF model directory holding the tokenizer (tokenizer.json) and chat template."""
    executor_addresses: tuple[str, ...]
    """host:port of each executor group's Execute service (a tensor-parallel group: its rank 0). Several: one
    scheduler drives them all, each group with its own KV block pool, Execute stream and run-ahead."""
    model_name: str = ""
    """Name clients must use in GenerateRequest.model (empty: the executor's model name)."""
    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    scheduling: SchedulingConfig = field(default_factory=SchedulingConfig)
    default_max_tokens: int = 256
    max_request_bytes: int = 4 * 1024 * 1024
    """Largest message the public gRPC API accepts (bigger: RESOURCE_EXHAUSTED from gRPC itself)."""
    executor_recovery_timeout_s: float = 60.0
    """After the executor is lost, how long requests wait for it (or a replacement at its address) to come back
    and resume (recomputed); then they end with UNAVAILABLE. 0: end them at once."""
    shutdown_grace_s: float = 30.0
    """On SIGTERM, how long running requests may take to finish before they end with UNAVAILABLE."""
    executor_connect_timeout_s: float = 600.0
    """How long to wait for the executor to answer Describe at start-up (it may be loading weights)."""
    metrics_port: int | None = None
    """Port of the Prometheus /metrics endpoint (None: off, 0: any free port)."""
    metrics_vllm_names: bool = False
    """Whether /metrics repeats the main series under vLLM's names (``vllm:...``, scheduler_svc/vllm_metric_names.py),
    for dashboards written for vLLM."""
    readiness: ReadinessConfig = field(default_factory=ReadinessConfig)
    http_port: int | None = None
    """Port of the OpenAI-compatible HTTP front (None: off, 0: any free port)."""
    tls_cert: str | None = None
    """PEM certificate (chain) of the public APIs, gRPC and HTTP; None: plaintext."""
    tls_key: str | None = None
    """PEM private key of ``tls_cert``."""
    api_keys: tuple[str, ...] = field(default=(), repr=False)
    """Bearer tokens the public APIs accept (with those of ``api_key_file``); none at all: no authentication."""
    api_key_file: str | None = None
    """File with one accepted key per line (blank lines and # comments skipped)."""
    executor_tls_ca: str | None = None
    """CA that signed the executor's certificate; setting any executor_tls_* field turns TLS on for that hop."""
    executor_tls_cert: str | None = None
    """The scheduler's client certificate for mutual TLS with the executor."""
    executor_tls_key: str | None = None
    """Private key of ``executor_tls_cert``."""
    num_spec_tokens: str = "auto"
    """K per step with a drafter: "dynamic" (chosen each step from the step profile and live acceptance), a
    number N (fixed; at most the executor's K_max) or "auto" (fixed at the executor's K_max)."""
    spec_profile_dir: str | None = None
    """Where step profiles are cached (None: the stepahead cache's profiles/ folder)."""
    tool_call_parser: str | None = None
    """The model's tool call syntax, one of TOOL_CALL_PARSERS: the HTTP front serves tool_choice "auto" (OpenAI's
    default with tools) by parsing calls from the output, and gRPC chat requests with tools get their calls parsed
    (GenerateResponse.tool_calls; GenerateRequest.parse_tool_calls chooses); None: "auto" is refused, no output is
    parsed."""
    enable_auto_tool_choice: bool = False
    """vLLM's --enable-auto-tool-choice, accepted so vLLM command lines run: tool_choice "auto" is served whenever
    ``tool_call_parser`` is set; set without one, it is refused (as in vLLM)."""
    reasoning_parser: str | None = None
    """One of REASONING_PARSERS: the engine splits a reasoning model's thinking from its answer (gRPC
    ``reasoning_text``, HTTP chat messages' ``reasoning`` and ``reasoning_content``); None: the output is all
    answer."""
    generation_config: str = "auto"
    """Default sampling parameters for what requests leave unset: "auto" (the model's generation_config.json),
    "none", or a directory holding a generation_config.json (vLLM's --generation-config)."""
    root_path: str = ""
    """The path prefix a reverse proxy serves the HTTP front under (vLLM's --root-path, e.g. ``/llm``): requests
    may come with it or without it (a proxy that strips it); empty: none."""
    enable_force_include_usage: bool = False
    """vLLM's flag: every chat and completion stream ends with its usage chunk, as if it asked
    (``stream_options.include_usage``)."""
    responses_store_size: int = DEFAULT_RESPONSES_STORE_SIZE
    """Responses the HTTP front's Responses API keeps in memory for previous_response_id and GET
    /v1/responses/{id} (the least recently used evicted first); 0: none (``store: true`` is refused)."""
    allowed_origins: tuple[str, ...] = ()
    """Web origins (``https://ui.example:8080``, or ``*`` for any) whose browser pages may call the HTTP front
    (CORS, vLLM's --allowed-origins); empty: none are answered with CORS headers."""
    default_chat_template_kwargs: str = ""
    """A JSON object of chat template variables every chat prompt is rendered with unless the request sets them
    (vLLM's --default-chat-template-kwargs, e.g. ``{"enable_thinking": false}``); empty: none."""
    chat_template: str | None = None
    """A Jinja file, or the template itself (text holding ``{{`` or ``{%``), that renders chat prompts instead of the
    model's own chat template (vLLM's --chat-template); None: the model's."""
    trust_request_chat_template: bool = False
    """Whether a request may bring its own chat template (ChatPrompt.chat_template): Jinja sandboxed, but a template
    may loop for as long as it likes, so only for trusted clients."""
    log_requests: bool = False
    """Whether each ended request is logged (one line: id, finish reason, token counts, timings; no text)."""
    allow_runtime_lora_updating: bool = False
    """Whether LoadLoraAdapter / UnloadLoraAdapter (HTTP /v1/load_lora_adapter, /v1/unload_lora_adapter) may change
    the served LoRA adapters: the executors read any directory a client names, so only for trusted clients."""

    def chat_template_source(self) -> str | None:
        """The Jinja source of ``chat_template``: the file's text, or the value itself; None when unset."""
        if self.chat_template is None:
            return None
        if _is_template_text(self.chat_template):
            return self.chat_template
        return Path(self.chat_template).expanduser().read_text(encoding="utf-8")

    @property
    def fixed_num_spec_tokens(self) -> int | None:
        """N of ``num_spec_tokens`` when it is a number, else None."""
        return int(self.num_spec_tokens) if self.num_spec_tokens.isdigit() else None

    @property
    def tls_enabled(self) -> bool:
        """Whether the public APIs serve TLS."""
        return self.tls_cert is not None

    @property
    def executor_tls_enabled(self) -> bool:
        """Whether the scheduler dials its executor over TLS."""
        return any(path is not None for path in (self.executor_tls_ca, self.executor_tls_cert, self.executor_tls_key))

    def load_api_keys(self) -> frozenset[str]:
        """Every accepted key: ``api_keys`` plus the lines of ``api_key_file`` (read now)."""
        from_file = read_api_key_file(self.api_key_file) if self.api_key_file is not None else []
        return frozenset((*self.api_keys, *from_file))

    def __post_init__(self) -> None:
        _require(self.executor_recovery_timeout_s >= 0, "executor_recovery_timeout_s",
                 f"must be >= 0, got {self.executor_recovery_timeout_s}")
        _require(self.shutdown_grace_s >= 0, "shutdown_grace_s", f"must be >= 0, got {self.shutdown_grace_s}")
        _require(self.max_request_bytes >= 1024, "max_request_bytes", f"must be >= 1024, got {self.max_request_bytes}")
        _require(self.root_path == "" or (self.root_path.startswith("/") and not self.root_path.endswith("/")),
                 "root_path", f"must start with / and not end with one, such as /llm; got {self.root_path!r}")
        _require(self.responses_store_size >= 0, "responses_store_size",
                 f"must be >= 0, got {self.responses_store_size}")
        _require(bool(self.model_dir), "model_dir", "must be set")
        self._check_executor_addresses()
        _require(0 <= self.port < 65536, "port", f"must be in [0, 65535], got {self.port}")
        _require(
            self.metrics_port is None or 0 <= self.metrics_port < 65536,
            "metrics_port",
            f"must be in [0, 65535], got {self.metrics_port}",
        )
        _require(self.default_max_tokens >= 1, "default_max_tokens", f"must be >= 1, got {self.default_max_tokens}")
        _require(
            self.executor_connect_timeout_s > 0,
            "executor_connect_timeout_s",
            f"must be > 0, got {self.executor_connect_timeout_s}",
        )
        _require(self.num_spec_tokens in ("auto", "dynamic") or self.num_spec_tokens.isdigit(), "num_spec_tokens",
                 f"must be dynamic, auto or a number >= 0, got {self.num_spec_tokens!r}")
        self._check_http_port()
        _require(self.tool_call_parser is None or self.tool_call_parser in TOOL_CALL_PARSERS, "tool_call_parser",
                 f"must be one of {', '.join(TOOL_CALL_PARSERS)}, got {self.tool_call_parser!r}")
        _require(not self.enable_auto_tool_choice or self.tool_call_parser is not None, "enable_auto_tool_choice",
                 "needs --tool-call-parser (the model's tool call syntax), as in vLLM")
        _require(self.reasoning_parser is None or self.reasoning_parser in REASONING_PARSERS, "reasoning_parser",
                 f"must be one of {', '.join(REASONING_PARSERS)}, got {self.reasoning_parser!r}")
        self._check_chat_template()
        self.chat_template_defaults()
        for origin in self.allowed_origins:
            _require(origin == "*" or _ORIGIN.fullmatch(origin) is not None, "allowed_origins",
                     f"{origin!r} is not * or an origin such as https://ui.example:8080 (scheme, host, port; no path)")
        _require(self.generation_config in ("auto", "none") or Path(self.generation_config).is_dir(),
                 "generation_config", f"must be auto, none or a directory, got {self.generation_config!r}")
        check_pair(self.tls_cert, self.tls_key, "tls_cert", "tls_key")
        check_pair(self.executor_tls_cert, self.executor_tls_key, "executor_tls_cert", "executor_tls_key")
        check_pem_file(self.executor_tls_ca, "executor_tls_ca")
        self._check_api_keys()

    def _check_executor_addresses(self) -> None:
        _require(isinstance(self.executor_addresses, tuple) and bool(self.executor_addresses), "executor_addresses",
                 f"must be a non-empty tuple of host:port, got {self.executor_addresses!r}")
        for index, address in enumerate(self.executor_addresses):
            _require(":" in address, f"executor_addresses[{index}]", f"must be host:port, got {address!r}")
        _require(len(set(self.executor_addresses)) == len(self.executor_addresses), "executor_addresses",
                 f"must not repeat an address, got {list(self.executor_addresses)}")

    def chat_template_defaults(self) -> dict[str, Any]:
        """``default_chat_template_kwargs`` as the variables; ValueError naming it when it is not a JSON object or
        names a variable the server sets itself."""
        if not self.default_chat_template_kwargs:
            return {}
        from scheduler_svc.tokenizer import template_names

        field_name = "default_chat_template_kwargs"
        try:
            value = json.loads(self.default_chat_template_kwargs)
        except ValueError as error:
            raise ValueError(f"{field_name}: not JSON ({error})") from None
        _require(isinstance(value, dict), field_name,
                 f"must be a JSON object, got {self.default_chat_template_kwargs!r}")
        reserved = sorted(set(value) & template_names())
        _require(not reserved, field_name, f"{reserved[0] if reserved else ''!r} is a variable the server sets itself")
        return dict(value)

    def _check_chat_template(self) -> None:
        if self.chat_template is None:
            return
        from scheduler_svc.tokenizer import check_template_compiles

        _require(_is_template_text(self.chat_template) or Path(self.chat_template).expanduser().is_file(),
                 "chat_template", f"no such file: {self.chat_template!r} (give a Jinja file or the template itself)")
        try:
            check_template_compiles(self.chat_template_source() or "")
        except (ValueError, OSError, UnicodeDecodeError) as error:
            raise ValueError(f"chat_template: {self.chat_template!r} {error}") from None

    def _check_http_port(self) -> None:
        if self.http_port is None:
            return
        _require(0 <= self.http_port < 65536, "http_port", f"must be in [0, 65535], got {self.http_port}")
        for other, value in (("port", self.port), ("metrics_port", self.metrics_port)):
            _require(self.http_port == 0 or self.http_port != value, "http_port", f"must differ from {other}")

    def _check_api_keys(self) -> None:
        for index, key in enumerate(self.api_keys):
            _require(bool(key) and key == key.strip() and " " not in key, f"api_keys[{index}]",
                     "must be non-empty, without spaces")
        if self.api_key_file is not None:
            try:
                keys = read_api_key_file(self.api_key_file)
            except OSError as error:
                reason = error.strerror or error
                raise ValueError(f"api_key_file: cannot read {self.api_key_file!r} ({reason})") from None
            _require(bool(keys), "api_key_file", f"{self.api_key_file!r} holds no key (one per line)")
