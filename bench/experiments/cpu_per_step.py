"""Where the time of a c=16 step goes on this 2-core machine, small checkpoint, 1 torch thread.

Alternates synchronous (inflight 1) and asynchronous (inflight 2) stacks for ROUNDS rounds, each
serving all 80 MT-Bench prompts (128 tokens) at concurrency 16, and reports per step:
- the wall time;
- the CPU time of the executor, the scheduler and this load generator (from /proc/PID/stat);
- the executor's own step time (compute start to end, as its StepResults report it);
- for the executor's compute (main) thread, from /proc/PID/task/TID/schedstat: its CPU time, the
  time it was runnable but waiting for a core (run delay), and the rest of the wall (blocked: waiting
  for a step, for the GIL, or for a lock).

    PYTHONPATH=.:proto python bench/experiments/cpu_per_step.py ROUNDS
(builds the small checkpoint in the cache if `stepahead bench --small-model` has not)"""
import os
import sys

from client import Client
from client.bench.load import run_load
from client.bench.small_model import make_small_checkpoint
from client.cache import stepahead_cache_dir
from client.model_resolver import resolve_model
from client.mtbench import load_mtbench_first_turns
from client.stack import LocalStack

TICK = os.sysconf("SC_CLK_TCK")


def process_cpu_s(pid: int) -> float:
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def thread_schedstat_s(pid: int, tid: int) -> tuple[float, float]:
    """(CPU time, run-queue wait) of one thread, in seconds."""
    on_cpu_ns, run_delay_ns, _ = open(f"/proc/{pid}/task/{tid}/schedstat").read().split()
    return int(on_cpu_ns) / 1e9, int(run_delay_ns) / 1e9


def measure(model: str, prompts: list[str], inflight: int) -> dict[str, float]:
    with LocalStack(model, ["--num-threads", "1"], ["--max-inflight-steps", str(inflight)]) as stack:
        run_load(stack.address, prompts[:2], 2, 16)  # warm the stack up
        pids = {"executor": stack.executor.process.pid, "scheduler": stack.scheduler.process.pid,
                "client": os.getpid()}
        executor = pids["executor"]
        cpu_before = {name: process_cpu_s(pid) for name, pid in pids.items()}
        main_before = thread_schedstat_s(executor, executor)
        with Client(stack.address) as client:
            before = client.model_info().stats
            load = run_load(stack.address, prompts, 16, 128)
            after = client.model_info().stats
            steps = after.steps - before.steps
        main_after = thread_schedstat_s(executor, executor)
        cpu_after = {name: process_cpu_s(pid) for name, pid in pids.items()}
    per_step = {"wall": load.wall_s / steps}
    per_step.update({name: (cpu_after[name] - cpu_before[name]) / steps for name in pids})
    per_step["step_compute"] = (after.executor_busy_s - before.executor_busy_s) / steps
    per_step["compute_cpu"] = (main_after[0] - main_before[0]) / steps
    per_step["compute_run_delay"] = (main_after[1] - main_before[1]) / steps
    per_step["compute_blocked"] = per_step["wall"] - per_step["compute_cpu"] - per_step["compute_run_delay"]
    return per_step


def main() -> None:
    rounds = int(sys.argv[1])
    model = str(make_small_checkpoint(stepahead_cache_dir() / "models" / "small-random-llama", resolve_model(None)))
    prompts = load_mtbench_first_turns()
    totals: dict[int, list[dict[str, float]]] = {1: [], 2: []}
    for round_index in range(rounds):
        for inflight in (1, 2):
            per_step = measure(model, prompts, inflight)
            totals[inflight].append(per_step)
            busy = per_step["executor"] + per_step["scheduler"] + per_step["client"]
            print(f"round {round_index} inflight {inflight}: " + " ".join(f"{k} {1e3 * v:.2f}" for k, v in per_step.items())
                  + f" ms/step; cores busy {busy / per_step['wall']:.2f}", flush=True)
    for inflight, runs in totals.items():
        keys = runs[0].keys()
        mean = {k: sum(r[k] for r in runs) / len(runs) for k in keys}
        busy = mean["executor"] + mean["scheduler"] + mean["client"]
        print(f"mean inflight {inflight}: " + " ".join(f"{k} {1e3 * v:.2f}" for k, v in mean.items())
              + f" ms/step; cores busy {busy / mean['wall']:.2f}")


if __name__ == "__main__":
    main()
