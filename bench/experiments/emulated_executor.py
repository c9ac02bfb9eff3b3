"""The scheduler's round trip against an executor as fast as the H100's 2-layer checkpoint, on this CPU.

Issue 18 asks for an executor bubble below 3% with async on the 2-layer checkpoint, where the H100 computes a
step in 0.8 ms (c=1) to 1.3 ms (c=16) and the scheduler, not the GPU, sets the pace. This script stands in for
that executor: a gRPC Executor process that follows the step protocol (prefill chunks, decodes, multi-step
sub-steps with their stop conditions) and spends STEP_MS + PER_TOKEN_MS x (tokens - 1, at most 15) per step
sleeping instead of computing, so the real scheduler and client run against GPU step times while the two cores
here stay theirs. Tokens are arbitrary (never EOS), so every request runs to max_tokens.

    PYTHONPATH=.:proto python3 bench/experiments/emulated_executor.py ROUNDS [STEP_MS PER_TOKEN_MS]

For each round, concurrency 1 and 16, scheduler settings (inflight 1/2/3, stream interval 1/4, multi-step 1/4; see
CONFIGS):
tok/s, the bubble (executor idle between steps / wall) and the part of it before the StepRequest arrived.
Needs the small checkpoint's directory for the tokenizer (`stepahead bench --small-model` builds it).
"""
from __future__ import annotations

import multiprocessing
import queue
import statistics
import sys
import threading
import time
from concurrent import futures

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from client import Client
from client.bench.load import run_load
from client.bench.small_model import make_small_checkpoint
from client.cache import stepahead_cache_dir
from client.launcher import ServiceProcess
from client.model_resolver import resolve_model
from client.mtbench import load_mtbench_first_turns
from client.stack import SCHEDULER_LISTENING
from stepahead_proto import executor_pb2, executor_pb2_grpc

VOCAB = 49152
EOS = 0
NUM_BLOCKS = 4096
BLOCK_SIZE = 16
MAX_MODEL_LEN = 2048


class _Sequence:
    def __init__(self, new: executor_pb2.NewRequestData) -> None:
        self.known = len(new.prompt_token_ids) + len(new.output_token_ids)
        self.outputs = len(new.output_token_ids)
        self.max_tokens = new.stop.max_tokens or 1 << 30
        self.seed = sum(map(ord, new.request_id))


class EmulatedExecutor(executor_pb2_grpc.ExecutorServicer):
    """Follows StepRequests and answers each after sleeping the step's emulated compute time."""

    def __init__(self, step_s: float, per_token_s: float) -> None:
        self.step_s, self.per_token_s = step_s, per_token_s
        self.sequences: dict[str, _Sequence] = {}

    def Describe(self, request, context):  # noqa: N802 - gRPC method name
        return executor_pb2.ExecutorDescription(
            model="emulated", max_model_len=MAX_MODEL_LEN, vocab_size=VOCAB, eos_token_ids=[EOS],
            block_size=BLOCK_SIZE, num_kv_blocks=NUM_BLOCKS, device="emulated", dtype="none",
            attention_backend="none", num_threads=1, spec_method="none", max_num_spec_tokens=0,
            model_fingerprint="emulated")

    def Execute(self, request_iterator, context):  # noqa: N802 - gRPC method name
        # Three threads, as a GPU executor overlaps them: gRPC's reader, the "device" (which starts the next
        # step the moment the previous one ends, if it has arrived), and this handler sending the results.
        arrivals: queue.Queue = queue.Queue()
        results: queue.Queue = queue.Queue()

        def read() -> None:
            try:
                for step in request_iterator:
                    arrivals.put((step, time.time()))
            except grpc.RpcError:
                pass  # the scheduler went away (each measurement stops it)
            arrivals.put(None)

        threading.Thread(target=read, daemon=True).start()
        threading.Thread(target=self._compute_loop, args=(arrivals, results), daemon=True).start()
        while (result := results.get()) is not None:
            yield result

    def _compute_loop(self, arrivals: queue.Queue, results: queue.Queue) -> None:
        last_end = 0.0
        while (item := arrivals.get()) is not None:
            step, received = item
            for request_id in step.finished_request_ids:
                self.sequences.pop(request_id, None)
            for sub_step in range(max(step.num_steps, 1)):
                start = max(time.time(), last_end)
                outputs, tokens = self._compute(step, sub_step)
                time.sleep(max(0.0, start + self.step_s + self.per_token_s * min(tokens - 1, 15) - time.time()))
                last_end = time.time()
                results.put(executor_pb2.StepResult(
                    step_id=step.step_id, outputs=outputs, compute_start_s=start, compute_end_s=last_end,
                    forward_s=last_end - start, sub_step=sub_step, received_s=received))
        results.put(None)

    def _compute(self, step: executor_pb2.StepRequest, sub_step: int) -> tuple[list, int]:
        outputs, tokens = [], 0
        for new in step.new_requests if sub_step == 0 else ():
            sequence = self.sequences[new.request_id] = _Sequence(new)
            tokens += new.num_scheduled_tokens
            done = new.num_computed_tokens + new.num_scheduled_tokens >= sequence.known
            outputs.append(self._output(new.request_id, sequence, done))
        for cached in step.cached_requests:
            sequence = self.sequences[cached.request_id]
            if sequence.outputs >= sequence.max_tokens:
                continue  # stopped in an earlier sub-step
            tokens += cached.num_scheduled_tokens
            done = sub_step > 0 or cached.num_computed_tokens + cached.num_scheduled_tokens >= sequence.known
            outputs.append(self._output(cached.request_id, sequence, done))
        return outputs, max(tokens, 1)

    def _output(self, request_id: str, sequence: _Sequence, sample: bool) -> executor_pb2.RequestStepOutput:
        if not sample:
            return executor_pb2.RequestStepOutput(request_id=request_id)
        token = 10 + (sequence.seed + sequence.outputs * 7919) % (VOCAB - 10)
        sequence.outputs += 1
        sequence.known += 1
        return executor_pb2.RequestStepOutput(request_id=request_id, token_ids=[token],
                                              finished=sequence.outputs >= sequence.max_tokens)

    def Profile(self, request, context):  # noqa: N802 - gRPC method name
        context.abort(grpc.StatusCode.UNIMPLEMENTED, "no profile: no drafter")


def serve(port_queue: multiprocessing.Queue, step_s: float, per_token_s: float) -> None:
    server = grpc.server(futures.ThreadPoolExecutor(4))
    executor_pb2_grpc.add_ExecutorServicer_to_server(EmulatedExecutor(step_s, per_token_s), server)
    health_servicer = health.HealthServicer()
    health_servicer.set("stepahead.v1.Executor", health_pb2.HealthCheckResponse.SERVING)
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    port_queue.put(server.add_insecure_port("127.0.0.1:0"))
    server.start()
    server.wait_for_termination()


def measure(model: str, prompts: list[str], concurrency: int, flags: list[str], step_s: float,
            per_token_s: float) -> dict[str, float]:
    port_queue: multiprocessing.Queue = multiprocessing.Queue()
    emulator = multiprocessing.Process(target=serve, args=(port_queue, step_s, per_token_s), daemon=True)
    emulator.start()
    address = f"127.0.0.1:{port_queue.get(timeout=30)}"
    argv = ServiceProcess.cli_argv("scheduler", "--model", model, "--executor", address, "--port", "0", *flags)
    scheduler = ServiceProcess("scheduler", argv)
    try:
        server = scheduler.start(SCHEDULER_LISTENING, 120)
        run_load(server, prompts[:4], min(concurrency, 4), 16)  # warm up
        with Client(server) as client:
            before = client.model_info().stats
            load = run_load(server, prompts, concurrency, 128)
            after = client.model_info().stats
        bubble = after.executor_bubble_s - before.executor_bubble_s
        awaiting = after.executor_bubble_awaiting_step_s - before.executor_bubble_awaiting_step_s
        steps = after.steps - before.steps
        tokens = sum(record.num_tokens for record in load.records)
        return {"tok_s": tokens / load.wall_s, "bubble": bubble / load.wall_s,
                "awaiting": awaiting / load.wall_s, "step_ms": 1e3 * (after.executor_busy_s -
                                                                      before.executor_busy_s) / steps}
    finally:
        scheduler.stop()
        emulator.kill()


CONFIGS = {
    "sync": ["--max-inflight-steps", "1"],
    "inflight 2": ["--max-inflight-steps", "2"],
    "inflight 3": ["--max-inflight-steps", "3"],
    "inflight 2, interval 4": ["--max-inflight-steps", "2", "--stream-interval", "4"],
    "inflight 2, multi-step 4": ["--max-inflight-steps", "2", "--num-scheduler-steps", "4"],
    "inflight 2, ms 4, int 4": ["--max-inflight-steps", "2", "--num-scheduler-steps", "4", "--stream-interval", "4"],
    "inflight 3, interval 4": ["--max-inflight-steps", "3", "--stream-interval", "4"],
    "inflight 3, ms 4, int 4": ["--max-inflight-steps", "3", "--num-scheduler-steps", "4", "--stream-interval", "4"],
}


def main() -> None:
    rounds = int(sys.argv[1])
    step_s = float(sys.argv[2]) / 1e3 if len(sys.argv) > 2 else 0.0008
    per_token_s = float(sys.argv[3]) / 1e3 if len(sys.argv) > 3 else 0.5e-3 / 15
    model = str(make_small_checkpoint(stepahead_cache_dir() / "models" / "small-random-llama", resolve_model(None)))
    prompts = load_mtbench_first_turns()
    print(f"emulated step {1e3 * step_s:.2f} ms + {1e3 * per_token_s:.3f} ms per extra token (at most 15)")
    runs: dict[tuple[int, str], list[dict[str, float]]] = {}
    for round_index in range(rounds):
        for concurrency in (1, 16):
            for name, flags in CONFIGS.items():
                count = 16 if concurrency == 1 else 80
                result = measure(model, prompts[:count], concurrency, flags, step_s, per_token_s)
                runs.setdefault((concurrency, name), []).append(result)
                print(f"round {round_index} c={concurrency:<3}{name:<26} " + "  ".join(
                    f"{key} {value:.4g}" for key, value in result.items()), flush=True)
    print("medians:")
    for (concurrency, name), results in runs.items():
        print(f"c={concurrency:<3}{name:<26} " + "  ".join(
            f"{key} {statistics.median(r[key] for r in results):.4g}" for key in results[0]))


if __name__ == "__main__":
    main()
