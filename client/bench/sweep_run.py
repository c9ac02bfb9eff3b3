"""Runs `stepahead bench --sweep`: a stack per (round, configuration), every concurrency on it."""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from pathlib import Path

from client.bench.prompt_fit import fitting_prompts
from client.bench.prompt_sets import load_prompts
from client.bench.sweep import (
    executor_overrides,
    format_sweep,
    scheduler_extra_flags,
    sweep_plan,
    sweep_summary,
    write_sweep_plot,
)

DEFAULT_SWEEP_CONCURRENCY = [1, 2, 4, 8, 16, 32]


def run_sweep(args: argparse.Namespace, model_dir: str, measure: Callable[..., dict]) -> dict:
    """Every (round, configuration) on a fresh stack, each concurrency in turn (``measure``: one load run,
    bench/cli.py's), then write JSON and PNG."""
    from client.bench.report import write_json
    from client.stack import LocalStack
    from executor_svc.cli_args import executor_flags
    from scheduler_svc.cli_args import scheduler_flags

    spec_method = args.spec_method if args.spec_method != "none" else "ngram"
    prompts = fitting_prompts(load_prompts(args.prompts), model_dir, args.max_model_len, args.max_tokens)
    inflight = args.max_inflight_steps[-1]
    base = {**vars(args), "max_inflight_steps": inflight, "num_scheduler_steps": args.num_scheduler_steps[0],
            "stream_interval": args.stream_interval[0]}
    scheduler_base = scheduler_flags(argparse.Namespace(**{**base, "spec_method": "none"}))
    runs = []
    for round_index, config in sweep_plan(args.sweep_max_k, args.rounds):
        overrides = executor_overrides(config, spec_method, args.sweep_max_k, args.draft_model)
        executor = executor_flags(argparse.Namespace(**{**base, **overrides}))
        with LocalStack(model_dir, executor, scheduler_base + scheduler_extra_flags(config), host=args.host) as stack:
            for concurrency in args.concurrency:
                run = measure(stack, prompts, concurrency, inflight, args, f" {config.label}")
                runs.append({**run, "config": config.label, "round": round_index})
    title = (f"{Path(model_dir).name}, {spec_method} drafts, {args.prompts} prompts, {args.num_threads} threads, "
             f"{args.rounds} round(s)")
    summary = sweep_summary(runs)
    report = {"model": model_dir, "spec_method": spec_method, "prompts": args.prompts, "title": title,
              "max_tokens": args.max_tokens, "num_threads": args.num_threads, "runs": runs, "summary": summary}
    stamp = time.strftime("%Y%m%d-%H%M%S")
    out = Path(args.out)
    write_json(report, out / f"sweep-{args.prompts}-{stamp}.json")
    write_sweep_plot(summary, title, out / f"sweep-{args.prompts}-{stamp}.png")
    print(format_sweep(summary))
    print(f"wrote {out / f'sweep-{args.prompts}-{stamp}.json'} and .png")
    return report
