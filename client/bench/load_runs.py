"""One round of `stepahead bench`'s load configurations, each on a local stack, with the bare forward timed on
each run's decode contexts.

By default every configuration gets a fresh stack (executor included) and its own bare-forward timing, right after
its runs. With ``--reuse-executor``, configurations that differ only in scheduler settings (run-ahead depth,
multi-step, stream interval) share one executor: only the scheduler restarts between them (an executor serves one
scheduler at a time and forgets the previous one's requests), and the bare forward is timed once per concurrency
(greedy: every such configuration decodes the same contexts). That is what makes a sweep of scheduler settings fit
one GPU call, where an executor start (graph capture, kernel warm-up) and the bare-forward subprocesses cost far more
than the runs themselves.
"""

from __future__ import annotations

import argparse
import functools
import itertools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from client.stack import LocalStack

Measure = Callable[..., dict]
"""client.bench.cli._measure: (stack, prompts, concurrency, inflight, args, label_suffix, api) -> run."""


@dataclass(frozen=True)
class LoadConfig:
    """One configuration of a round: scheduler settings, and what its executor(s) run."""

    inflight: int
    num_steps: int
    groups: int
    interval: int
    tracing_on: bool | None
    spec_method: str

    @property
    def executor_key(self) -> tuple[Any, ...]:
        """What the executors depend on: configurations with the same key can share them."""
        return self.groups, self.tracing_on, self.spec_method

    def label_suffix(self, args: argparse.Namespace) -> str:
        """The run label's part after ``c=N inflight=M``."""
        from client.bench.groups_compare import group_label
        from client.bench.tracing_compare import mode_label

        return (("" if self.num_steps == 1 else f" steps={self.num_steps}") + interval_label(self.interval)
                + group_label(self.groups, args.executor_groups)
                + ("" if self.tracing_on is None else mode_label(self.tracing_on))
                + ("" if args.spec_method == "none" else f" spec={self.spec_method}"))


def interval_label(interval: int) -> str:
    """A run label's part for --stream-interval (none for the default 1)."""
    return "" if interval == 1 else f" interval={interval}"


@dataclass
class _StackSlot:
    """The stack of the configuration being run; with ``reuse``, kept for the next one with the same executors."""

    reuse: bool
    key: tuple[Any, ...] | None = None
    stack: LocalStack | None = None
    bare_forwards: dict[int, tuple[dict, dict | None]] = field(default_factory=dict)
    """Per concurrency, the bare forward (eager, graph-replayed) timed on the kept stack's executor."""

    def stack_for(self, key: tuple[Any, ...], scheduler_flags: list[str], make: Callable[[], LocalStack]) -> LocalStack:
        if self.reuse and self.stack is not None and self.key == key:
            self.stack.restart_scheduler(scheduler_flags)
            return self.stack
        self.close()
        stack = make()
        stack.start()
        self.key, self.stack = key, stack
        return stack

    def done_with_config(self) -> None:
        if not self.reuse:
            self.close()

    def close(self) -> None:
        if self.stack is not None:
            self.stack.stop()
        self.key, self.stack = None, None
        self.bare_forwards = {}


def load_runs(model_dir: str, prompts: list[str], args: argparse.Namespace, round_index: int,
              measure: Measure) -> tuple[list[dict], dict | None]:
    """One round of every load configuration; with --tracing, on stacks with tracing off and on.

    Returns the runs and, with --tracing, what the in-process OTLP receiver saw.
    """
    from client.bench.otlp_receiver import OtlpReceiver
    from client.bench.tracing_compare import step_trace_rate

    runs: list[dict] = []
    receiver = OtlpReceiver(keep_spans=False) if args.tracing else None
    slot = _StackSlot(reuse=args.reuse_executor)
    try:
        endpoint = receiver.start() if receiver else ""
        for config in _configs(args, round_index):
            stack = slot.stack_for(config.executor_key, _scheduler_flags(args, config),
                                   functools.partial(_new_stack, model_dir, args, config, endpoint))
            runs += _runs_on(stack, slot, model_dir, prompts, args, round_index, config, measure)
            slot.done_with_config()
    finally:
        slot.close()
        if receiver:
            receiver.stop()
    if receiver is None:
        return runs, None
    return runs, {"step_trace_rate": step_trace_rate(), "spans_received": receiver.num_spans}


def _configs(args: argparse.Namespace, round_index: int) -> list[LoadConfig]:
    """The round's configurations: the scheduler and group settings in round order (reversed in odd rounds, so the
    first, sync in the usual order, is not always the one to pay a round's start-up costs), each with every tracing
    mode and drafter."""
    from client.bench.rounds import round_order
    from client.bench.speculation import spec_variants
    from client.bench.tracing_compare import tracing_order

    modes = tracing_order(args.tracing_rounds) if args.tracing else [None]
    variants = spec_variants(args.spec_method, args.also_spec_method)
    grid = itertools.product(args.max_inflight_steps, args.num_scheduler_steps, args.executor_groups,
                             args.stream_interval)
    return [LoadConfig(inflight, num_steps, groups, interval, tracing_on, spec_method)
            for inflight, num_steps, groups, interval in round_order(list(grid), round_index)
            for tracing_on, spec_method in itertools.product(modes, variants)]


def _scheduler_flags(args: argparse.Namespace, config: LoadConfig) -> list[str]:
    from scheduler_svc.cli_args import scheduler_flags

    flags = scheduler_flags(argparse.Namespace(**{
        **vars(args), "max_inflight_steps": config.inflight, "num_scheduler_steps": config.num_steps,
        "stream_interval": config.interval}))
    return flags + (["--http-port", "0"] if "http" in args.api else [])


def _new_stack(model_dir: str, args: argparse.Namespace, config: LoadConfig, endpoint: str) -> LocalStack:
    from client.bench.groups_compare import executor_cpus
    from client.bench.tracing_compare import stack_env
    from client.stack import LocalStack
    from executor_svc.cli_args import executor_flags

    env = None if config.tracing_on is None else stack_env(config.tracing_on, endpoint)
    draft_model = args.draft_model if config.spec_method == "draft_model" else None
    executor_args = argparse.Namespace(**{**vars(args), "spec_method": config.spec_method, "draft_model": draft_model})
    return LocalStack(model_dir, executor_flags(executor_args), _scheduler_flags(args, config), host=args.host,
                      env=env, executor_groups=config.groups,
                      executor_cpus=executor_cpus(config.groups, args.pin_executors))


def _runs_on(stack: LocalStack, slot: _StackSlot, model_dir: str, prompts: list[str], args: argparse.Namespace,
             round_index: int, config: LoadConfig, measure: Measure) -> list[dict]:
    """The configuration's runs at every concurrency (through every API), each with its bare forward."""
    from client.bench.http_compare import api_label
    from client.bench.rounds import round_order

    runs = []
    for concurrency in args.concurrency:
        group = []
        for api in round_order(args.api, round_index):
            run = measure(stack, prompts, concurrency, config.inflight, args,
                          config.label_suffix(args) + api_label(api), api)
            group.append({**run, "api": api, "spec_method": config.spec_method, "round": round_index,
                          "num_scheduler_steps": config.num_steps, "executor_groups": config.groups,
                          "stream_interval": config.interval})
        bare, graph = _bare_forwards(slot, model_dir, args, concurrency, group[0]["decode_contexts"])
        for run in group:
            run["bare_forward"] = bare
            if graph is not None:
                run["bare_forward_graph"] = graph
            runs.append(run if config.tracing_on is None else {**run, "tracing": config.tracing_on})
    return runs


def _bare_forwards(slot: _StackSlot, model_dir: str, args: argparse.Namespace, concurrency: int,
                   contexts: list[int]) -> tuple[dict, dict | None]:
    """The bare forward on the run's contexts, eager and (CUDA, graphs on) graph-replayed: timed right after the
    runs, so machine drift between the two stays small; with --reuse-executor, once per concurrency."""
    from client.bench.baselines import measure_bare_decode_forward_in_subprocess

    if concurrency in slot.bare_forwards:
        return slot.bare_forwards[concurrency]
    setup = args.forward_setup
    bare = measure_bare_decode_forward_in_subprocess(model_dir, args.num_threads, contexts, setup=setup)
    graph = None
    if setup.is_cuda and not args.enforce_eager:  # the step as the executor replays it
        graph = measure_bare_decode_forward_in_subprocess(model_dir, args.num_threads, contexts, setup=setup,
                                                          graphs=True)
    if slot.reuse:
        slot.bare_forwards[concurrency] = bare, graph
    return bare, graph
