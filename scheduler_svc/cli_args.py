"""Command-line flags of `stepahead scheduler`."""

from __future__ import annotations

import argparse

from scheduler_svc.config import ReadinessConfig, SchedulerServiceConfig, SchedulingConfig


def add_scheduler_arguments(parser: argparse.ArgumentParser, several_inflight_values: bool = False) -> None:
    """Flags shared by `stepahead scheduler`, `serve` and `bench` (which may compare several inflight depths)."""
    group = parser.add_argument_group("scheduler")
    group.add_argument("--max-num-seqs", type=int, default=64, help="most requests running at once (default 64)")
    group.add_argument("--max-num-batched-tokens", type=int, default=512, help="token budget of one step (default 512)")
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
    group.add_argument("--executor-stall-timeout-s", type=float, default=5.0,
                       help="not ready when the executor returns no step for this long with work pending (default 5)")


def scheduler_config_from_args(
    args: argparse.Namespace, model_dir: str, executor_address: str, port: int, host: str
) -> SchedulerServiceConfig:
    """Build the validated config from parsed flags."""
    return SchedulerServiceConfig(
        model_dir=model_dir,
        executor_address=executor_address,
        model_name=getattr(args, "served_model_name", "") or "",
        host=host,
        port=port,
        scheduling=SchedulingConfig(
            max_num_seqs=args.max_num_seqs,
            max_num_batched_tokens=args.max_num_batched_tokens,
            max_inflight_steps=args.max_inflight_steps,
            num_scheduler_steps=args.num_scheduler_steps,
        ),
        default_max_tokens=args.default_max_tokens,
        metrics_port=args.metrics_port,
        readiness=ReadinessConfig(executor_stall_timeout_s=args.executor_stall_timeout_s),
    )


def scheduler_flags(args: argparse.Namespace) -> list[str]:
    """The same flags as a list, to start a scheduler process from `stepahead serve`."""
    flags = [
        "--max-num-seqs", str(args.max_num_seqs),
        "--max-num-batched-tokens", str(args.max_num_batched_tokens),
        "--max-inflight-steps", str(args.max_inflight_steps),
        "--num-scheduler-steps", str(args.num_scheduler_steps),
        "--default-max-tokens", str(args.default_max_tokens),
        "--executor-stall-timeout-s", str(args.executor_stall_timeout_s),
    ]
    if args.metrics_port is not None:
        flags += ["--metrics-port", str(args.metrics_port)]
    return flags
