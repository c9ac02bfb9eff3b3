"""The engine loop's own CPU per token, in process, against the unit tests' instant fake executor: no gRPC,
no executor, no Generate handlers; what is left of the scheduler's CPU per token in a bench run is theirs.

    python3 bench/experiments/engine_cpu_per_token.py CONCURRENCY TOKENS INFLIGHT [profile]
"""
import asyncio, cProfile, pstats, sys, time
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests" / "scheduler_svc"))
from test_engine import FakeExecutorStub
from scheduler_svc.block_manager import KVBlockManager
from scheduler_svc.config import SchedulingConfig
from scheduler_svc.engine import Engine
from scheduler_svc.request import Request, StopParams
from scheduler_svc.scheduler import Scheduler
from scheduler_svc.tokenizer import Tokenizer
from client.model_resolver import resolve_model
from stepahead_proto import sampling_pb2

C = int(sys.argv[1]); TOK = int(sys.argv[2]); INFL = int(sys.argv[3]); PROF = len(sys.argv) > 4
tok = Tokenizer.from_dir(resolve_model("default"))

async def main():
    stub = FakeExecutorStub()
    sched = Scheduler(SchedulingConfig(max_num_batched_tokens=8192, max_num_seqs=C, max_inflight_steps=INFL),
                      KVBlockManager(4096, 16), max_model_len=4096)
    eng = Engine(sched, tok, stub, max_model_len=4096, max_inflight_steps=INFL)
    eng.start()
    prompt = tok.encode("Tell me a story about a dragon who learns to code in Python.") if hasattr(tok, "encode") else list(range(20, 60))
    reqs = [Request(f"r{i}", list(prompt), sampling_pb2.SamplingParams(),
                    StopParams(max_tokens=TOK, eos_token_ids=frozenset({2}), ignore_eos=True)) for i in range(C)]
    t0 = time.perf_counter(); c0 = time.process_time()
    queues = [eng.add_request(r) for r in reqs]
    async def drain(q):
        n = 0
        while True:
            m = await q.get(); n += len(m.token_ids)
            if m.finish_reason: return n
    counts = await asyncio.gather(*(drain(q) for q in queues))
    wall = time.perf_counter() - t0; cpu = time.process_time() - c0
    await eng.stop()
    n = sum(counts)
    print(f"c={C} tokens={n} inflight={INFL}: {1e3*cpu/n:.4f} ms CPU/token, wall {wall:.2f}s, {n/wall:.0f} tok/s")

if PROF:
    pr = cProfile.Profile(); pr.enable(); asyncio.run(main()); pr.disable()
    pstats.Stats(pr).sort_stats("tottime").print_stats(30)
else:
    asyncio.run(main())
