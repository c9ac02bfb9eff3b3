"""`stepahead bench`: flags and the run that ties load runs, baselines and the report together."""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from pathlib import Path

from client.bench.forward_setup import ForwardSetup
from client.bench.load_runs import interval_label, load_runs


def add_bench_parser(commands) -> None:
    """Register the `bench` subcommand."""
    from client.bench.http_compare import API_CHOICES
    from client.bench.model_shapes import SHAPES
    from client.bench.prompt_sets import PROMPT_SETS
    from client.cli_values import positive_int
    from executor_svc.cli_args import add_executor_arguments
    from executor_svc.config import SPEC_METHODS
    from scheduler_svc.cli_args import add_scheduler_arguments

    bench = commands.add_parser("bench", help="benchmark the stack on MT-Bench prompts, with HF baselines")
    bench.add_argument("--model", default=None, help="model to serve (default: SmolLM2-135M-Instruct)")
    bench.add_argument("--concurrency", type=positive_int, nargs="+", default=None,
                       help="client concurrencies (default 1 16; with --sweep 1 2 4 8 16 32)")
    bench.add_argument("--sweep", action="store_true",
                       help="throughput over the concurrencies for no speculation, K = 1..--sweep-max-k fixed and "
                            "dynamic K (drafter: --spec-method, n-gram by default), one line each in the plot")
    bench.add_argument("--sweep-max-k", type=positive_int, default=5, help="largest fixed K of --sweep (default 5)")
    bench.add_argument("--prompts", choices=PROMPT_SETS, default="mtbench",
                       help="mtbench: MT-Bench first turns; code: complete the first lines of Python stdlib "
                            "functions (default mtbench)")
    bench.add_argument("--num-prompts", type=positive_int, default=None,
                       help="prompts per run, spread evenly over the set when fewer (default: 8 at concurrency 1, "
                            "one per MT-Bench category; else every MT-Bench first turn, or 2x concurrency if "
                            "that is more)")
    bench.add_argument("--prompts-per-client", type=positive_int, default=None,
                       help="prompts per run = this x concurrency (at least 8); shorter runs at every "
                            "concurrency, for sweeps (overrides --num-prompts)")
    bench.add_argument("--max-tokens", type=positive_int, default=256,
                       help="max tokens per request; EOS stops earlier (default 256)")
    bench.add_argument("--ignore-eos", action="store_true",
                       help="every request generates exactly --max-tokens (HF peers too): fixed-length runs")
    bench.add_argument("--model-shape", default=None, choices=sorted(SHAPES),
                       help="serve random weights of this shape with the default tokenizer (--load-format dummy)")
    bench.add_argument("--no-hf", action="store_true", help="skip the HF transformers baselines")
    bench.add_argument("--hf-peers", nargs="+", choices=("eager", "compiled"), default=["eager", "compiled"],
                       help="which HF baselines to run: eager generate at each concurrency, static-cache compiled "
                            "generate at batch 1 (CUDA, with concurrency 1) (default both; --no-hf: neither)")
    bench.add_argument("--weight-floor", action="store_true",
                       help="measure the device's copy bandwidth and report each step's weight-read floor (always on "
                            "CUDA): bytes of weights / bandwidth")
    bench.add_argument("--small-model", action="store_true",
                       help="serve a small random 2-layer checkpoint with the default tokenizer "
                            "(scheduling-bound regime)")
    bench.add_argument("--out", default="bench/out", help="directory for the JSON report and PNG plot")
    bench.add_argument("--host", default="127.0.0.1")
    bench.add_argument("--served-model-name", default="")
    bench.add_argument("--tracing", action="store_true",
                       help="run each configuration with tracing off and on (OTLP to an in-process receiver) "
                            "and report the throughput ratio")
    bench.add_argument("--tracing-rounds", type=positive_int, default=1,
                       help="off/on stack pairs per configuration with --tracing (default 1)")
    bench.add_argument("--rounds", type=positive_int, default=1,
                       help="repeat every load configuration this many times, alternating, and report the "
                            "median of each ratio over the rounds (default 1)")
    bench.add_argument("--api", nargs="+", choices=API_CHOICES, default=["grpc"],
                       help="drive the gRPC API, the OpenAI-compatible HTTP front (streamed chat completions), or "
                            "both against the same stack: --api grpc http reports HTTP/gRPC throughput (default grpc)")
    bench.add_argument("--executor-groups", type=positive_int, nargs="+", default=[1],
                       help="run every load configuration with each of these numbers of executor groups behind "
                            "one scheduler and report the throughput ratio to one group (default 1)")
    bench.add_argument("--also-spec-method", nargs="+", default=[], choices=SPEC_METHODS, metavar="METHOD",
                       help="more drafters to run beside --spec-method in every round, each on a stack of its own "
                            "(compares drafters in one run)")
    bench.add_argument("--reuse-executor", action="store_true",
                       help="configurations that differ only in scheduler settings (--max-inflight-steps, "
                            "--num-scheduler-steps, --stream-interval) share one executor, only the scheduler "
                            "restarting, and one bare-forward timing per concurrency (sweeps on a GPU)")
    bench.add_argument("--pin-executors", action="store_true",
                       help="run executor i on CPU i only (taskset), with --num-threads threads each")
    add_scheduler_arguments(bench, several_inflight_values=True, public_api=False)
    add_executor_arguments(bench, spec_default="none")
    bench.set_defaults(num_threads=2)


def _prompts_for(concurrency: int, num_prompts: int | None, prompts: list[str],
                 per_client: int | None = None) -> list[str]:
    """The prompts of one run: fewer than the set are spread evenly over it, more cycle through it.

    Spread, because the set is ordered by kind (MT-Bench: ten writing questions, then ten roleplay, ...
    ten humanities): its first eight are all writing, whose acceptance and lengths are not MT-Bench's.
    Batched runs use every prompt by default: with only two waves of requests the longest ones set the
    run's length for continuous and static batching alike, and the run would hardly measure batching.
    """
    if per_client is not None:
        num_prompts = max(8, per_client * concurrency)
    count = num_prompts or (8 if concurrency == 1 else max(len(prompts), 2 * concurrency))
    if count < len(prompts):
        return [prompts[i * len(prompts) // count] for i in range(count)]
    return [prompts[i % len(prompts)] for i in range(count)]


def run_bench(args: argparse.Namespace) -> dict:
    """Run every load configuration against a fresh local stack, then the baselines; write the report."""
    from client.bench.baselines import measure_bare_decode_forward_in_subprocess
    from client.bench.groups_compare import group_ratios
    from client.bench.http_compare import http_ratios
    from client.bench.report import format_table, write_json, write_plot
    from client.bench.speculation import speculation_ratios
    from client.bench.tracing_compare import tracing_ratios
    from client.model_resolver import resolve_model
    from client.out_paths import writable_dir

    if args.rounds < 1:
        raise ValueError(f"--rounds: must be >= 1, got {args.rounds}")
    writable_dir("out", args.out)
    if args.concurrency is None:
        from client.bench.sweep_run import DEFAULT_SWEEP_CONCURRENCY

        args.concurrency = DEFAULT_SWEEP_CONCURRENCY if args.sweep else [1, 16]
    model_dir = str(resolve_model(args.model))
    if args.small_model:
        from client.bench.small_model import make_small_checkpoint
        from client.cache import stepahead_cache_dir

        model_dir = str(make_small_checkpoint(stepahead_cache_dir() / "models" / "small-random-llama", Path(model_dir)))
    if args.model_shape:
        from client.bench.model_shapes import write_shape_dir
        from client.cache import stepahead_cache_dir

        shape_dir = stepahead_cache_dir() / "models" / f"shape-{args.model_shape}"
        model_dir = str(write_shape_dir(args.model_shape, Path(model_dir), shape_dir))
        args.load_format = "dummy"
    setup = ForwardSetup(args.device, args.dtype, args.attention_backend, args.load_format)
    args.forward_setup = setup
    if args.sweep:
        from client.bench.sweep_run import run_sweep

        return run_sweep(args, model_dir, _measure)
    from client.bench.prompt_fit import fitting_prompts
    from client.bench.prompt_sets import load_prompts

    prompts = fitting_prompts(load_prompts(args.prompts), model_dir, args.max_model_len, args.max_tokens)
    report: dict = {"model": model_dir, "num_threads": args.num_threads, "max_tokens": args.max_tokens,
                    "title": f"stepahead bench: {Path(model_dir).name}, {args.num_threads} torch threads",
                    "runs": [], "hf": [], "bare_forward": []}
    stamp = time.strftime("%Y%m%d-%H%M%S")
    out = Path(args.out)

    def save_partial(stage: str) -> None:
        """What a run cut short (a device call's time limit, while the HF baselines run) still leaves."""
        write_json({**report, "partial": stage}, out / f"bench-{stamp}.partial.json")

    for round_index in range(args.rounds):
        runs, tracing = load_runs(model_dir, prompts, args, round_index, _measure)
        report["runs"] += runs
        save_partial(f"after the load runs of round {round_index}")
        if tracing:
            spans = report.get("tracing", {}).get("spans_received", 0)
            report["tracing"] = {**tracing, "spans_received": spans + tracing["spans_received"]}
        _run_hf_peers(report, args, model_dir, prompts, round_index, save_partial)
    if setup.is_cuda or args.weight_floor:
        report["weight_floor"] = _weight_floor(model_dir, setup)
    first_runs = _first_run_per_concurrency(report["runs"])
    report["bare_forward"] = [run["bare_forward"] for run in first_runs.values()]
    report["ratios"] = _ratios(report)
    report["ratios"].update(http_ratios(report["runs"]))
    report["ratios"].update(group_ratios(report["runs"]))
    if args.spec_method != "none" and 1 in first_runs:
        # V(K) compares two forwards timed one right after the other, on the contexts decoded at c=1
        # (greedy: every run at one concurrency decodes the same).
        contexts = first_runs[1]["decode_contexts"]
        one_token, verify = (
            measure_bare_decode_forward_in_subprocess(model_dir, args.num_threads, contexts, query_len=q,
                                                      setup=setup)
            for q in (1, args.num_spec_tokens + 1))
        report["bare_forward"] += [one_token, verify]
        report["ratios"].update(speculation_ratios(
            _grpc_runs(report["runs"]), one_token["median_ms"], verify["median_ms"], args.num_spec_tokens))
    report["ratios"].update(tracing_ratios(_grpc_runs(report["runs"])))
    write_json(report, out / f"bench-{stamp}.json")
    (out / f"bench-{stamp}.partial.json").unlink(missing_ok=True)
    write_plot(report, out / f"bench-{stamp}.png")
    print(format_table(report))
    print(f"wrote {out / f'bench-{stamp}.json'} and .png")
    return report


def _run_hf_peers(report: dict, args: argparse.Namespace, model_dir: str, prompts: list[str], round_index: int,
                  save_partial: Callable[[str], None]) -> None:
    """HF transformers on the same prompts: static-cache compiled generate at batch 1 (CUDA), then eager generate
    per concurrency; the report is saved after each, so a run cut by a time limit keeps the peers it finished."""
    from client.bench.baselines import hf_compiled_generate_throughput, hf_generate_throughput

    setup = args.forward_setup
    peers = set() if args.no_hf else set(args.hf_peers)
    # The compiled peer first: the GPU targets compare with it.
    if "compiled" in peers and setup.is_cuda and 1 in args.concurrency:
        chosen = _prompts_for(1, args.num_prompts, prompts, args.prompts_per_client)
        chosen = chosen if len(chosen) <= 8 else _prompts_for(1, 8, chosen)  # compiled generate is slow to warm
        compiled = hf_compiled_generate_throughput(model_dir, chosen, args.max_tokens, setup)
        report.setdefault("hf_compiled", []).append({**compiled, "round": round_index})
        _done(f"HF static-cache compiled, batch 1: {compiled['throughput_tok_s']:.1f} tok/s")
        save_partial(f"after HF compiled of round {round_index}")
    if "eager" in peers:
        for concurrency in args.concurrency:
            chosen = _prompts_for(concurrency, args.num_prompts, prompts, args.prompts_per_client)
            hf = hf_generate_throughput(model_dir, chosen,
                                        concurrency, args.max_tokens, args.num_threads, setup, args.ignore_eos)
            report["hf"].append({**hf, "round": round_index})
            _done(f"HF batch {concurrency}: {hf['throughput_tok_s']:.1f} tok/s")
            save_partial(f"after HF batch {concurrency} of round {round_index}")


def _weight_floor(model_dir: str, setup: ForwardSetup) -> dict:
    """The weight-read floor of a decode step of this model on the bench's device, bandwidth measured now."""
    import torch

    from client.bench.weight_floor import measure_copy_bandwidth, weight_read_floor

    bandwidth = measure_copy_bandwidth(torch.device(setup.device))
    return weight_read_floor(model_dir, getattr(torch, setup.dtype_name), bandwidth)


def _measure(
    stack, prompts: list[str], concurrency: int, inflight: int, args: argparse.Namespace, label_suffix: str = "",
    api: str = "grpc",
) -> dict:
    """One load run through ``api``, with the executor's busy and bubble time over exactly that run."""
    from client.bench.http_load import run_http_load
    from client.bench.load import run_load
    from client.bench.stats import summarize
    from client.sync_client import Client

    chosen = _prompts_for(concurrency, args.num_prompts, prompts, args.prompts_per_client)
    with Client(stack.address) as client:
        before = client.model_info().stats
        if api == "http":
            result = run_http_load(stack.http_url, chosen, concurrency, args.max_tokens)
        else:
            result = run_load(stack.address, chosen, concurrency, args.max_tokens, args.ignore_eos)
        after = client.model_info().stats
    summary = summarize(result)
    summary.update(
        label=f"c={concurrency} inflight={inflight}{label_suffix}",
        max_inflight_steps=inflight,
        steps=after.steps - before.steps,
        executor_busy_s=after.executor_busy_s - before.executor_busy_s,
        executor_bubble_s=after.executor_bubble_s - before.executor_bubble_s,
        executor_bubble_awaiting_step_s=after.executor_bubble_awaiting_step_s - before.executor_bubble_awaiting_step_s,
        result_delivery_s=after.result_delivery_s - before.result_delivery_s,
        step_delivery_s=after.step_delivery_s - before.step_delivery_s,
        executor_draft_s=after.executor_draft_s - before.executor_draft_s,
        executor_forward_s=after.executor_forward_s - before.executor_forward_s,
        step_requests=after.step_requests - before.step_requests,
        scheduler_invocations=after.scheduler_invocations - before.scheduler_invocations,
        scheduler_cpu_s=after.scheduler_cpu_s - before.scheduler_cpu_s,
    )
    summary.update(per_token_counts(summary))
    summary["bubble_fraction"] = summary["executor_bubble_s"] / result.wall_s
    summary["bubble_awaiting_step_fraction"] = summary["executor_bubble_awaiting_step_s"] / result.wall_s
    summary["executor_step_ms_mean"] = 1000 * summary["executor_busy_s"] / max(summary["steps"], 1)
    summary["result_delivery_ms_mean"] = 1000 * summary["result_delivery_s"] / max(summary["steps"], 1)
    summary["step_delivery_ms_mean"] = 1000 * summary["step_delivery_s"] / max(summary["step_requests"], 1)
    summary["executor_forward_ms_mean"] = 1000 * summary["executor_forward_s"] / max(summary["steps"], 1)
    summary["itl_p50_over_executor_step"] = summary["itl_ms_p50"] / summary["executor_step_ms_mean"]
    summary["tpot_over_executor_step"] = summary["tpot_ms_mean"] / summary["executor_step_ms_mean"]
    _done(f"{summary['label']}: {summary['throughput_tok_s']:.1f} tok/s, "
          f"bubble {100 * summary['bubble_fraction']:.1f}% ({100 * summary['bubble_awaiting_step_fraction']:.1f}% "
          "awaiting the step)")
    return summary


def _done(message: str) -> None:
    """One finished measurement, with the wall-clock time (a device call's log then shows what each part took)."""
    print(f"done: {message} [{time.strftime('%H:%M:%S')}]", flush=True)


def _grpc_runs(runs: list[dict]) -> list[dict]:
    """The runs through the gRPC API (those through HTTP have a ratio of their own: http_compare.py)."""
    return [run for run in runs if run.get("api", "grpc") == "grpc"]


def _first_run_per_concurrency(runs: list[dict]) -> dict[int, dict]:
    """The first run at each concurrency, by ascending concurrency."""
    firsts: dict[int, dict] = {}
    for run in runs:
        firsts.setdefault(run["concurrency"], run)
    return dict(sorted(firsts.items()))


def _ratios(report: dict) -> dict:
    """The acceptance ratios per configuration (label), each the median over the rounds: ITL (TPOT for runs with
    several tokens per stream message) vs the bare forward timed after the same run, throughput vs HF at equal
    batch and vs sync, both of the same round; for sync runs, the bare forward vs the executor's idle gap between
    steps."""
    per_label: dict[str, dict[str, list[float]]] = {}
    hf = {(h.get("round", 0), h["batch_size"]): h["throughput_tok_s"] for h in report["hf"]}
    hf_compiled = {h.get("round", 0): h["throughput_tok_s"] for h in report.get("hf_compiled", [])}
    by_round_label = {(run.get("round", 0), run["label"]): run for run in report["runs"]}
    for run in _grpc_runs(report["runs"]):
        c, label = run["concurrency"], run["label"]
        values = per_label.setdefault(label, {})
        # With several tokens per stream message most ITL samples are 0: compare the time per output token instead.
        key, name = ("itl_ms_p50", "itl_p50") if run.get("stream_interval", 1) == 1 else ("tpot_ms_mean", "tpot")
        latency = run.get(key)  # reports written before TPOT existed have none
        if latency is not None:
            values.setdefault(f"{name}_over_bare_forward_batch{c}[{label}]", []).append(
                latency / run["bare_forward"]["median_ms"])
        graph_forward = run.get("bare_forward_graph")
        if graph_forward is not None and latency is not None:
            values.setdefault(f"{name}_over_graph_forward_batch{c}[{label}]", []).append(
                latency / graph_forward["median_ms"])
        compiled = hf_compiled.get(run.get("round", 0))
        if compiled is not None and c == 1:
            values.setdefault(f"throughput_over_hf_compiled_batch1[{label}]", []).append(
                run["throughput_tok_s"] / compiled)
        floor = report.get("weight_floor")
        if floor is not None and latency is not None:
            values.setdefault(f"{name}_over_weight_floor_batch{c}[{label}]", []).append(latency / floor["floor_ms"])
        hf_same_round = hf.get((run.get("round", 0), c))
        if hf_same_round is not None:
            values.setdefault(f"throughput_over_hf_batch{c}[{label}]", []).append(
                run["throughput_tok_s"] / hf_same_round)
        gap_ms = _sync_gap_ms(run)
        if gap_ms is not None:
            # The regime: how the forward compares with one step's scheduling + RPC + detokenization.
            values.setdefault(f"bare_forward_over_sync_gap[{label}]", []).append(
                run["bare_forward"]["median_ms"] / gap_ms)
        interval = run.get("stream_interval", 1)
        per_message = by_round_label.get((run.get("round", 0), label.replace(interval_label(interval), "")))
        if interval != 1 and per_message is not None:
            values.setdefault(f"throughput_over_interval1[{label}]", []).append(
                run["throughput_tok_s"] / per_message["throughput_tok_s"])
        sync = by_round_label.get((run.get("round", 0), f"c={c} inflight=1"))
        if sync is not None and run is not sync:
            values.setdefault(f"throughput_over_sync[{label}]", []).append(
                run["throughput_tok_s"] / sync["throughput_tok_s"])
    return {name: statistics.median(samples) for values in per_label.values() for name, samples in values.items()}


def _sync_gap_ms(run: dict) -> float | None:
    """A synchronous run's mean executor idle gap per step (ms): the scheduler's work + RPC; None for
    other runs and for a run without a measurable gap."""
    if run.get("max_inflight_steps") != 1 or not run.get("steps") or run["executor_bubble_s"] <= 0:
        return None
    return 1000 * run["executor_bubble_s"] / run["steps"]


def per_token_counts(summary: dict) -> dict:
    """StepRequests, scheduler invocations and scheduler CPU seconds per generated token."""
    tokens = max(summary["output_tokens"], 1)
    return {
        "step_requests_per_token": summary["step_requests"] / tokens,
        "scheduler_invocations_per_token": summary["scheduler_invocations"] / tokens,
        "scheduler_cpu_s_per_token": summary["scheduler_cpu_s"] / tokens,
    }
