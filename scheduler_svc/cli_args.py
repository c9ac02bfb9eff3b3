"""Command-line flags of `stepahead scheduler`."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from scheduler_svc.config import (
    DEFAULT_RESPONSES_STORE_SIZE,
    REASONING_PARSERS,
    SCHEDULING_POLICIES,
    TOOL_CALL_PARSERS,
    ReadinessConfig,
    SchedulerServiceConfig,
    SchedulingConfig,
)


def add_scheduler_arguments(
    parser: argparse.ArgumentParser, several_inflight_values: bool = False, public_api: bool = True
) -> None:
    """Flags shared by `stepahead scheduler`, `serve` and `bench` (which may compare several inflight depths,
    and serves its public API plainly: ``public_api`` False leaves out the HTTP, TLS and API-key flags)."""
    group = parser.add_argument_group("scheduler")
    group.add_argument("--max-num-seqs", type=int, default=64, help="most requests running at once (default 64)")
    group.add_argument("--max-num-batched-tokens", type=int, default=512, help="token budget of one step (default 512)")
    group.add_argument("--max-queued-requests", type=int, default=1024,
                       help="most requests waiting to start; beyond it Generate is refused with RESOURCE_EXHAUSTED "
                            "(HTTP 429) (default 1024)")
    group.add_argument("--max-request-bytes", type=int, default=4 * 1024 * 1024,
                       help="largest Generate request the public gRPC API accepts, in bytes (default 4 MiB)")
    group.add_argument("--executor-recovery-timeout-s", type=float, default=60.0,
                       help="when the executor is lost, keep its requests and resume them (recomputed) once it or a "
                            "replacement at the same address answers; after this many seconds they end with "
                            "UNAVAILABLE (0: at once) (default 60)")
    group.add_argument("--shutdown-grace-s", type=float, default=30.0,
                       help="on SIGTERM: stop admitting, let running requests finish for this long, then end the "
                            "rest with UNAVAILABLE and exit 0 (default 30)")
    if several_inflight_values:
        group.add_argument("--stream-interval", type=int, nargs="+", default=[1],
                           help="compare these stream intervals in one run (default 1)")
    else:
        group.add_argument("--stream-interval", type=int, default=1,
                           help="tokens per streamed message after a request's first (the last carries what "
                                "remains); above 1, fewer and larger messages where sending them limits throughput "
                                "(default 1)")
    if several_inflight_values:  # the bench: its runs repeat prompts, which the cache would find
        group.add_argument("--enable-prefix-caching", action="store_true",
                           help="serve with prefix caching (default off here: a run would find the prompts of the "
                                "runs before it cached)")
    else:
        group.add_argument("--enable-prefix-caching", action=argparse.BooleanOptionalAction, default=True,
                           help="reuse the KV blocks of a prompt prefix computed before (the same tokens from the "
                                "start, whole blocks) instead of computing them again (default on)")
    group.add_argument("--max-queue-wait-s", type=float, default=None,
                       help="a request still waiting to start after this many seconds ends with RESOURCE_EXHAUSTED "
                            "(default: no limit)")
    group.add_argument("--generation-config", default="auto", metavar="auto|none|DIR",
                       help="default temperature, top_p, top_k, min_p, repetition_penalty and max_tokens for what a "
                            "request leaves unset: the model's generation_config.json (auto), none, or DIR's "
                            "(default auto, as vLLM)")
    group.add_argument("--scheduling-policy", choices=SCHEDULING_POLICIES, default="fcfs",
                       help="fcfs: requests start in arrival order (their priority must be 0); priority: lower "
                            "GenerateRequest.priority values start first and are preempted last, and a waiting "
                            "request preempts running ones of lower priority when it cannot start (default fcfs)")
    if several_inflight_values:
        group.add_argument("--max-inflight-steps", type=int, nargs="+", default=[1, 2],
                           help="compare these run-ahead depths in one run (default 1 2)")
    else:
        group.add_argument("--max-inflight-steps", type=int, default=2,
                           help="steps outstanding on the executor; 1 = synchronous (default 2)")
    if several_inflight_values:
        group.add_argument("--num-scheduler-steps", type=int, nargs="+", default=[1],
                           help="compare these multi-step depths in one run (default 1)")
    else:
        group.add_argument("--num-scheduler-steps", type=int, default=1,
                           help="decode sub-steps per StepRequest when every request only decodes (default 1)")
    group.add_argument(
        "--default-max-tokens", type=int, default=256, help="max_tokens when a request sets none (default 256)"
    )
    group.add_argument("--metrics-port", type=int, default=None,
                       help="serve the scheduler's Prometheus /metrics on this port (0: any free port; default off)")
    group.add_argument("--metrics-vllm-names", action="store_true",
                       help="repeat the main series under vLLM's names (vllm:num_requests_running, ...) on /metrics, "
                            "so dashboards written for vLLM read them (default: stepahead's names only)")
    group.add_argument("--executor-stall-timeout-s", type=float, default=5.0,
                       help="not ready when the executor returns no step for this long with work pending (default 5)")
    group.add_argument("--spec-profile-dir", default=None,
                       help="cache of step profiles for dynamic K (default: $STEPAHEAD_CACHE/profiles)")
    if public_api:
        add_public_api_arguments(parser)


def add_spec_tokens_argument(parser: argparse.ArgumentParser) -> None:
    """--num-spec-tokens of `stepahead scheduler` (under serve, the executor flag of the same name sets both)."""
    parser.add_argument("--num-spec-tokens", default="auto",
                        help="K per step with a drafter: dynamic, a fixed N <= the executor's K, or auto (the "
                             "executor's K, fixed; `stepahead serve` defaults to dynamic) (default auto)")


def add_public_api_arguments(parser: argparse.ArgumentParser) -> None:
    """The HTTP front, TLS and API keys of the public APIs, and TLS towards the executor."""
    group = parser.add_argument_group("public API security and HTTP")
    group.add_argument("--http-port", type=int, default=None,
                       help="serve the OpenAI-compatible HTTP API on this port (0: any free port; default off)")
    group.add_argument("--enable-auto-tool-choice", action="store_true",
                       help="accepted as in vLLM command lines, where it turns tool_choice \"auto\" on: here "
                            "--tool-call-parser alone does; without one this flag is refused")
    group.add_argument("--tool-call-parser", choices=TOOL_CALL_PARSERS, default=None,
                       help="parse tool calls from the output in this model syntax, as vLLM's parser of the name "
                            '(HTTP tool_choice "auto", OpenAI\'s default with tools; gRPC chat requests with tools, '
                            "GenerateResponse.tool_calls, parse_tool_calls chooses): hermes "
                            "(<tool_call>{...}</tool_call> blocks: Hermes, Qwen), llama3_json ({\"name\": ..., "
                            '"parameters": {...}} objects, maybe after <|python_tag|>, ";"-separated: Llama 3.x), '
                            "pythonic ([f(a=1), g()]: Llama 3.2/4), mistral ([TOOL_CALLS] [{...}]: Mistral) or "
                            "openai (gpt-oss's harmony messages to=functions.NAME; with --reasoning-parser "
                            "openai_gptoss) "
                            '(default: none: HTTP "auto" is refused, no output is parsed)')
    group.add_argument("--reasoning-parser", choices=REASONING_PARSERS, default=None,
                       help="return a reasoning model's thinking apart from its answer, over HTTP as chat messages' "
                            "reasoning (and reasoning_content), over gRPC as reasoning_text (a request's "
                            "split_reasoning chooses; default: chat prompts): deepseek_r1 (the template opens the "
                            "<think> block: DeepSeek-R1, QwQ), qwen3 (the model opens it: Qwen3, SmolLM3) or "
                            "openai_gptoss (gpt-oss's analysis channel) (default: none)")
    group.add_argument("--root-path", default="", metavar="PATH",
                       help="the path prefix a reverse proxy serves the HTTP API under, such as /llm, as vLLM's flag: "
                            "requests may come with it or without it (default: none)")
    group.add_argument("--enable-force-include-usage", action="store_true",
                       help="end every chat and completion stream with its usage chunk, as if it asked "
                            "(stream_options.include_usage), as vLLM's flag (default: when asked)")
    group.add_argument("--responses-store-size", type=int, default=DEFAULT_RESPONSES_STORE_SIZE, metavar="N",
                       help="Responses API responses kept in memory for previous_response_id and GET "
                            "/v1/responses/{id}, least recently used evicted first; 0: none "
                            f"(default: {DEFAULT_RESPONSES_STORE_SIZE})")
    group.add_argument("--allowed-origins", nargs="+", default=None, metavar="ORIGIN",
                       help="web origins whose pages may call the HTTP API from a browser (CORS), such as "
                            "https://ui.example:8080, or * for any, as vLLM's flag (default: none)")
    group.add_argument("--chat-template", default=None,
                       help="a Jinja file, or the template itself, rendering chat prompts instead of the model's own "
                            "chat template, as vLLM's flag (default: the model's)")
    group.add_argument("--default-chat-template-kwargs", default="", metavar="JSON",
                       help="chat template variables every chat prompt gets unless the request sets them, as a JSON "
                            "object such as '{\"enable_thinking\": false}', as vLLM's flag (default: none)")
    group.add_argument("--trust-request-chat-template", action="store_true",
                       help="accept a request's own chat template (ChatPrompt.chat_template, HTTP chat_template): "
                            "it runs sandboxed but unbounded in time, so only for trusted clients (default: refused)")
    group.add_argument("--enable-log-requests", action="store_true",
                       help="log one line per ended request (id, finish reason, prompt, cached and output tokens, "
                            "queue, TTFT, ITL and end-to-end times, preemptions, accepted drafts; no text), as "
                            "vLLM's flag (default: off)")
    group.add_argument("--allow-runtime-lora-updating", action="store_true",
                       help="let clients load and unload LoRA adapters while serving (LoadLoraAdapter, HTTP "
                            "/v1/load_lora_adapter; executors need free slots, --max-loras): the executors read any "
                            "directory a client names, so only for trusted clients (default: refused)")
    group.add_argument("--tls-cert", default=None, help="PEM certificate: serve the public APIs (gRPC, HTTP) over TLS")
    group.add_argument("--tls-key", default=None, help="PEM private key of --tls-cert")
    group.add_argument("--api-key", default=None,
                       help="require 'Authorization: Bearer <key>' on the public APIs (health stays open)")
    group.add_argument("--api-key-file", default=None, help="accepted API keys, one per line")
    group.add_argument("--executor-tls-ca", default=None, help="CA of the executor's certificate: reach it over TLS")
    group.add_argument("--executor-tls-cert", default=None,
                       help="the scheduler's client certificate for mutual TLS with the executor")
    group.add_argument("--executor-tls-key", default=None, help="PEM private key of --executor-tls-cert")


def scheduler_config_from_args(
    args: argparse.Namespace, model_dir: str, executor_addresses: Sequence[str], port: int, host: str
) -> SchedulerServiceConfig:
    """Build the validated config from parsed flags."""
    return SchedulerServiceConfig(
        model_dir=model_dir,
        executor_addresses=tuple(executor_addresses),
        model_name=getattr(args, "served_model_name", "") or "",
        host=host,
        port=port,
        scheduling=SchedulingConfig(
            max_num_seqs=args.max_num_seqs,
            max_num_batched_tokens=args.max_num_batched_tokens,
            max_inflight_steps=args.max_inflight_steps,
            num_scheduler_steps=args.num_scheduler_steps,
            max_queued_requests=args.max_queued_requests,
            max_queue_wait_s=args.max_queue_wait_s,
            stream_interval=args.stream_interval,
            enable_prefix_caching=getattr(args, "enable_prefix_caching", True),
            scheduling_policy=getattr(args, "scheduling_policy", "fcfs"),
        ),
        default_max_tokens=args.default_max_tokens,
        max_request_bytes=args.max_request_bytes,
        shutdown_grace_s=args.shutdown_grace_s,
        executor_recovery_timeout_s=args.executor_recovery_timeout_s,
        metrics_port=args.metrics_port,
        metrics_vllm_names=bool(getattr(args, "metrics_vllm_names", False)),
        readiness=ReadinessConfig(executor_stall_timeout_s=args.executor_stall_timeout_s),
        http_port=getattr(args, "http_port", None),
        tls_cert=getattr(args, "tls_cert", None),
        tls_key=getattr(args, "tls_key", None),
        api_keys=(args.api_key,) if getattr(args, "api_key", None) else (),
        api_key_file=getattr(args, "api_key_file", None),
        executor_tls_ca=getattr(args, "executor_tls_ca", None),
        executor_tls_cert=getattr(args, "executor_tls_cert", None),
        executor_tls_key=getattr(args, "executor_tls_key", None),
        num_spec_tokens=str(getattr(args, "num_spec_tokens", "auto")),
        spec_profile_dir=getattr(args, "spec_profile_dir", None),
        tool_call_parser=getattr(args, "tool_call_parser", None),
        enable_auto_tool_choice=bool(getattr(args, "enable_auto_tool_choice", False)),
        reasoning_parser=getattr(args, "reasoning_parser", None),
        chat_template=getattr(args, "chat_template", None),
        default_chat_template_kwargs=getattr(args, "default_chat_template_kwargs", "") or "",
        allowed_origins=tuple(getattr(args, "allowed_origins", None) or ()),
        responses_store_size=getattr(args, "responses_store_size", DEFAULT_RESPONSES_STORE_SIZE),
        enable_force_include_usage=bool(getattr(args, "enable_force_include_usage", False)),
        root_path=getattr(args, "root_path", "") or "",
        trust_request_chat_template=bool(getattr(args, "trust_request_chat_template", False)),
        allow_runtime_lora_updating=bool(getattr(args, "allow_runtime_lora_updating", False)),
        log_requests=bool(getattr(args, "enable_log_requests", False)),
        generation_config=getattr(args, "generation_config", "auto"),
    )


def scheduler_flags(args: argparse.Namespace) -> list[str]:
    """The same flags as a list, to start a scheduler process from `stepahead serve`."""
    flags = [
        "--max-num-seqs", str(args.max_num_seqs),
        "--max-num-batched-tokens", str(args.max_num_batched_tokens),
        "--max-inflight-steps", str(args.max_inflight_steps),
        "--num-scheduler-steps", str(args.num_scheduler_steps),
        "--max-queued-requests", str(args.max_queued_requests),
        "--max-request-bytes", str(args.max_request_bytes),
        "--shutdown-grace-s", str(args.shutdown_grace_s),
        "--executor-recovery-timeout-s", str(args.executor_recovery_timeout_s),
        "--default-max-tokens", str(args.default_max_tokens),
        "--executor-stall-timeout-s", str(args.executor_stall_timeout_s),
        "--stream-interval", str(args.stream_interval),
        "--scheduling-policy", str(getattr(args, "scheduling_policy", "fcfs")),
        "--generation-config", str(getattr(args, "generation_config", "auto")),
    ]
    if args.metrics_port is not None:
        flags += ["--metrics-port", str(args.metrics_port)]
    if getattr(args, "metrics_vllm_names", False):
        flags.append("--metrics-vllm-names")
    if args.max_queue_wait_s is not None:
        flags += ["--max-queue-wait-s", str(args.max_queue_wait_s)]
    if getattr(args, "trust_request_chat_template", False):
        flags.append("--trust-request-chat-template")
    if getattr(args, "root_path", ""):
        flags += ["--root-path", args.root_path]
    if getattr(args, "enable_force_include_usage", False):
        flags.append("--enable-force-include-usage")
    if getattr(args, "enable_auto_tool_choice", False):
        flags.append("--enable-auto-tool-choice")
    if getattr(args, "default_chat_template_kwargs", ""):
        flags += ["--default-chat-template-kwargs", args.default_chat_template_kwargs]
    if getattr(args, "allow_runtime_lora_updating", False):
        flags.append("--allow-runtime-lora-updating")
    if getattr(args, "enable_log_requests", False):
        flags.append("--enable-log-requests")
    if getattr(args, "allowed_origins", None):
        flags += ["--allowed-origins", *args.allowed_origins]
    store_size = getattr(args, "responses_store_size", DEFAULT_RESPONSES_STORE_SIZE)
    if store_size != DEFAULT_RESPONSES_STORE_SIZE:
        flags += ["--responses-store-size", str(store_size)]
    caching = getattr(args, "enable_prefix_caching", True)
    flags.append("--enable-prefix-caching" if caching else "--no-enable-prefix-caching")
    if getattr(args, "spec_method", "none") != "none" and getattr(args, "num_spec_tokens", None) is not None:
        flags += ["--num-spec-tokens", str(args.num_spec_tokens)]  # serve: dynamic or N
    for name in ("spec_profile_dir", "http_port", "tool_call_parser", "reasoning_parser", "chat_template", "tls_cert",
                 "tls_key", "api_key_file", "executor_tls_ca", "executor_tls_cert", "executor_tls_key"):
        value = getattr(args, name, None)
        if value is not None:
            flags += ["--" + name.replace("_", "-"), str(value)]
    return flags


def scheduler_secret_env(args: argparse.Namespace) -> dict[str, str]:
    """Settings `stepahead serve` hands the scheduler in its environment rather than its argv (which any
    local user can read): the API key."""
    key = getattr(args, "api_key", None)
    return {"STEPAHEAD_API_KEY": key} if key else {}
