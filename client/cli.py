"""The `stepahead` command: serve, scheduler, executor, generate, bench, health, make-certs.

Every flag of `serve`, `scheduler` and `executor` also reads STEPAHEAD_<FLAG_NAME> from the
environment (see client/env_defaults.py); docker-compose.yml configures the services that way.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading

from client.env_defaults import RepeatableOption
from scheduler_svc.config import DEFAULT_PORT


def _add_model_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", default=None,
                        help="local HF directory, .gguf file or hub id (default: SmolLM2-135M-Instruct)")
    parser.add_argument("--served-model-name", default="",
                        help="name clients use (default: the model directory's name)")
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")


def _add_client_tls_arguments(parser: argparse.ArgumentParser, api_key: bool = True) -> None:
    parser.add_argument("--tls-ca", default=None, help="CA certificate (PEM) to trust: talk TLS to the server")
    if api_key:
        parser.add_argument("--api-key", default=None, help="API key sent as 'Authorization: Bearer <key>'")


def _build_parser() -> argparse.ArgumentParser:
    from client.chat_cli import add_chat_arguments
    from client.cli_values import non_negative_int, positive_float, positive_int
    from client.generate_cli import add_generate_arguments
    from client.tokenize_cli import add_tokenize_arguments
    from executor_svc.cli_args import add_executor_arguments, add_executor_tls_arguments, add_metrics_argument
    from scheduler_svc.cli_args import add_scheduler_arguments, add_spec_tokens_argument
    from stepahead_common.version import package_version

    parser = argparse.ArgumentParser(prog="stepahead",
                                     description="LLM serving: a scheduler and an executor over gRPC.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {package_version()}")
    commands = parser.add_subparsers(dest="command", required=True)

    serve = commands.add_parser("serve", help="start scheduler + executor as two processes")
    _add_model_argument(serve)
    serve.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"public API port (default {DEFAULT_PORT})")
    add_scheduler_arguments(serve)
    add_executor_arguments(serve, dynamic_k=True)
    add_executor_tls_arguments(serve, server_certificate=False)
    serve.add_argument("--executor-groups", type=positive_int, default=1,
                       help="start N executors (each a TP group with --tensor-parallel-size) behind the one "
                            "scheduler, each with its own KV cache (default 1)")
    serve.add_argument("--executor-max-restarts", type=non_negative_int, default=5,
                       help="restart a crashed executor this many times at most (backoff 1, 2, 4, ... s); the "
                            "scheduler resumes its requests there (default 5; 0: exit when it crashes)")
    serve.add_argument("--scheduler-max-restarts", type=non_negative_int, default=5,
                       help="restart a crashed scheduler this many times at most (backoff 1, 2, 4, ... s), on the "
                            "same ports, the executors keeping their models; its requests end UNAVAILABLE "
                            "(default 5; 0: exit when it crashes)")

    scheduler = commands.add_parser("scheduler", help="start the scheduler service alone")
    _add_model_argument(scheduler)
    scheduler.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"public API port (default {DEFAULT_PORT})")
    scheduler.add_argument("--executor", required=True, action=RepeatableOption,
                           help="host:port of an executor (a tensor-parallel group: its rank 0); repeat it to drive "
                                "several executor groups, each with its own KV cache (new requests go to the group "
                                "with the most free KV blocks)")
    add_scheduler_arguments(scheduler)
    add_spec_tokens_argument(scheduler)

    executor = commands.add_parser("executor", help="start the executor service alone")
    _add_model_argument(executor)
    executor.add_argument("--port", type=int, default=50061, help="executor API port (default 50061)")
    add_executor_arguments(executor)
    add_executor_tls_arguments(executor)
    add_metrics_argument(executor)

    generate = commands.add_parser("generate", help="stream a completion from a running server")
    add_generate_arguments(generate)
    _add_client_tls_arguments(generate)

    chat = commands.add_parser("chat", help="a conversation with a running server in the terminal")
    add_chat_arguments(chat)
    _add_client_tls_arguments(chat)

    tokenize = commands.add_parser("tokenize", help="a prompt's token ids on a running server (chat template applied)")
    add_tokenize_arguments(tokenize)
    _add_client_tls_arguments(tokenize)

    health = commands.add_parser("health", help="exit 0 if a service reports SERVING (container health checks)")
    health.add_argument("address", help="host:port of a scheduler or executor")
    health.add_argument("--service", default="",
                        help='"" = liveness (default); stepahead.v1.Generation or stepahead.v1.Executor = readiness')
    health.add_argument("--timeout", type=positive_float, default=3.0,
                        help="seconds to wait for the answer (default 3)")
    _add_client_tls_arguments(health, api_key=False)
    health.add_argument("--tls-cert", default=None, help="client certificate (an executor with --tls-client-ca)")
    health.add_argument("--tls-key", default=None, help="private key of --tls-cert")

    certs = commands.add_parser("make-certs", help="write a throwaway CA, server and client certificates (TLS, mTLS)")
    certs.add_argument("--out", required=True, help="directory to write ca.pem, server.pem, client.pem and keys to")
    certs.add_argument("--san", action="append", default=[],
                       help="extra name or IP the server certificate is valid for (repeatable; "
                            "localhost, 127.0.0.1 and ::1 always are)")
    certs.add_argument("--days", type=positive_int, default=365, help="validity in days (default 365)")

    from client.bench.cli import add_bench_parser

    add_bench_parser(commands)
    from client.profile_cli import add_profile_parser

    add_profile_parser(commands)
    from client.soak.run import add_soak_parser

    add_soak_parser(commands)
    from client.gpu_check import add_gpu_check_parser

    add_gpu_check_parser(commands)
    from client.train_drafter_cli import add_train_drafter_parser

    add_train_drafter_parser(commands)
    from client.lora_cli import add_lora_parser

    add_lora_parser(commands, _add_client_tls_arguments)
    from client.env_defaults import attach_env_defaults

    for service_parser in (serve, scheduler, executor):
        attach_env_defaults(service_parser, os.environ)
    for client_parser in (generate, chat):
        attach_env_defaults(client_parser, os.environ, only=("api_key",))
    return parser


def _run_executor(args: argparse.Namespace) -> None:
    from client.model_resolver import resolve_model
    from executor_svc.cli_args import executor_config_from_args

    model_dir = str(resolve_model(args.model))
    config = executor_config_from_args(args, model_dir, args.port, args.host)
    from executor_svc.server import serve

    serve(config)
    _exit_at_once()


def _exit_at_once() -> None:
    """Exit 0 without the interpreter's teardown: once the executor has stopped in order (server, tracing,
    ranks), tearing down torch and the gRPC threads only costs about a second on every stop."""
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def _run_scheduler(args: argparse.Namespace) -> None:
    from client.model_resolver import resolve_model
    from scheduler_svc.cli_args import scheduler_config_from_args
    from scheduler_svc.server import run

    model_dir = str(resolve_model(args.model))
    run(scheduler_config_from_args(args, model_dir, args.executor, args.port, args.host))


def _run_serve(args: argparse.Namespace) -> None:
    from client.env_defaults import without_flag_variables
    from client.model_resolver import resolve_model
    from client.serve_supervisor import RestartLimits, supervise
    from client.stack import LocalStack
    from client.startup_progress import print_to_stderr
    from executor_svc.cli_args import executor_flags
    from scheduler_svc.cli_args import scheduler_flags, scheduler_secret_env

    model_dir = str(resolve_model(args.model, progress=print_to_stderr))
    name_flags = ["--served-model-name", args.served_model_name] if args.served_model_name else []
    stack = LocalStack(
        model_dir,
        executor_flags=executor_flags(args) + name_flags,
        scheduler_flags=scheduler_flags(args) + name_flags,
        port=args.port,
        host=args.host,
        env={**without_flag_variables(os.environ, args), **scheduler_secret_env(args)},
        executor_groups=args.executor_groups,
        progress=print_to_stderr,  # one line per start-up phase; the serving line below stays alone on stdout
    )
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):  # while starting: interrupt the start (the stack stops its services)
        signal.signal(sig, signal.default_int_handler)
    try:
        address = stack.start()
        for sig in (signal.SIGINT, signal.SIGTERM):  # once serving: drain, then stop
            signal.signal(sig, lambda *_: stop.set())
        assert stack.scheduler is not None  # started by stack.start()
        http = f" and {stack.http_url}" if stack.http_url else ""
        metrics = f"metrics on {stack.metrics_address}; " if stack.metrics_address else ""
        print(f"stepahead serving {model_dir} on {address}{http} ({metrics}Ctrl-C to stop)", flush=True)
        supervise(stack, stop, RestartLimits(args.executor_max_restarts, args.scheduler_max_restarts),
                  args.executor_recovery_timeout_s)
    finally:
        stack.stop(scheduler_timeout_s=args.shutdown_grace_s + 5.0)  # the scheduler drains, then exits


def _run_health(args: argparse.Namespace) -> None:
    from client.health_check import SERVING, health_status

    status = health_status(args.address, args.service, args.timeout, args.tls_ca, args.tls_cert, args.tls_key)
    print(status)
    raise SystemExit(0 if status == SERVING else 1)


def _run_make_certs(args: argparse.Namespace) -> None:
    from pathlib import Path

    from client.certs import make_certs

    try:
        paths = make_certs(Path(args.out), args.san, args.days)
    except OSError as error:
        raise ValueError(f"out: cannot write to {args.out}: {error.strerror or error}") from None
    print(f"wrote {paths.ca} (trust it), {paths.server} + {paths.server_key} (servers), "
          f"{paths.client} + {paths.client_key} (the scheduler's client certificate)")


def main(argv: list[str] | None = None) -> None:
    """Entry point of the `stepahead` console script."""
    from client.env_defaults import resolve_env_defaults

    args = resolve_env_defaults(_build_parser().parse_args(argv))
    from stepahead_common.parent_watch import stop_when_launcher_exits

    stop_when_launcher_exits(os.environ)
    from client.chat_cli import run_chat
    from client.errors import StepaheadError
    from client.generate_cli import run_generate
    from client.launcher import ServiceStartError
    from client.model_resolver import ModelResolutionError
    from client.tokenize_cli import run_tokenize
    from scheduler_svc.executor_connections import ExecutorUnreachableError
    from stepahead_common.ports import PortBindError

    handlers = {
        "serve": _run_serve,
        "scheduler": _run_scheduler,
        "executor": _run_executor,
        "generate": run_generate,
        "chat": run_chat,
        "tokenize": run_tokenize,
        "health": _run_health,
        "make-certs": _run_make_certs,
    }
    try:
        if args.command == "profile":
            from client.profile_cli import run_profile

            run_profile(args)
        elif args.command == "bench":
            from client.bench.cli import run_bench

            run_bench(args)
        elif args.command == "soak":
            from client.soak.run import run_soak

            run_soak(args)
        elif args.command == "train-drafter":
            from client.train_drafter_cli import run_train_drafter

            run_train_drafter(args)
        elif args.command == "lora":
            from client.lora_cli import run_lora

            run_lora(args)
        elif args.command == "gpu-check":
            from client.gpu_check import run_gpu_check

            raise SystemExit(run_gpu_check(args))
        else:
            handlers[args.command](args)
    except (StepaheadError, ModelResolutionError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        raise SystemExit(2) from None
    except (PortBindError, ExecutorUnreachableError) as error:
        print(f"error: {error}", file=sys.stderr)
        raise SystemExit(1) from None
    except ServiceStartError as error:
        # The child's own "error: <field>: ..." line is in the log printed here; a refused setting stays exit 2.
        print(f"error: {error}", file=sys.stderr)
        raise SystemExit(2 if error.exit_code == 2 else 1) from None
    except KeyboardInterrupt:
        raise SystemExit(130) from None


if __name__ == "__main__":
    main()
