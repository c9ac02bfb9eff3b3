"""Background streams' gaps while two hostile clients send the longest prompts the limits let through.

Against the emulated executor (2 ms steps, max_model_len 8192 as the default model's): 4 streams of 128 tokens loop
for 8 s, alone and beside 2 clients that each send a 524,288-character text prompt (the character limit for 8,192
tokens; refused after tokenization, 116k tokens) every 0.2 s; twice each. Run from the checkout to measure:
    PYTHONPATH=.:proto python3 bench/experiments/prompt_tokenization_stall.py
(for the code before a change: a `git worktree` of it, with this script and emulated_executor.py copied in)."""
import asyncio, multiprocessing, statistics, sys, time
sys.path[:0] = ["bench/experiments"]
import emulated_executor as emu
from emulated_executor import serve, SCHEDULER_LISTENING
from client import AsyncClient, InvalidArgumentError
from client.launcher import ServiceProcess
from client.bench.small_model import make_small_checkpoint
from client.cache import stepahead_cache_dir
from client.model_resolver import resolve_model

emu.MAX_MODEL_LEN = 8192
HOSTILE = ("The quick brown fox jumps over the lazy dog. " * 12000)[: 64 * 8192]

async def stream(client, gaps, stop_at):
    while time.monotonic() < stop_at:
        last = None
        async for chunk in client.generate_stream(prompt="Tell me a story.", max_tokens=128, ignore_eos=True,
                                                  temperature=0.0):
            now = time.monotonic()
            if last is not None:
                gaps.append(now - last)
            last = now

async def hostile(client, stop_at, refused):
    while time.monotonic() < stop_at:
        try:
            await client.generate(prompt=HOSTILE, max_tokens=1)
        except InvalidArgumentError:
            refused.append(1)
        await asyncio.sleep(0.2)

async def main(address, with_hostile):
    gaps, refused = [], []
    async with AsyncClient(address) as client:
        stop_at = time.monotonic() + 8
        tasks = [stream(client, gaps, stop_at) for _ in range(4)]
        if with_hostile:
            tasks += [hostile(client, stop_at, refused) for _ in range(2)]
        await asyncio.gather(*tasks)
    gaps.sort()
    return f"hostile={with_hostile}: {len(gaps)} gaps, p50 {1e3*gaps[len(gaps)//2]:.1f} ms, p99 {1e3*gaps[int(len(gaps)*0.99)]:.1f} ms, max {1e3*gaps[-1]:.1f} ms; hostile refused {len(refused)}"

model = str(make_small_checkpoint(stepahead_cache_dir() / "models" / "small-random-llama", resolve_model(None)))
q = multiprocessing.Queue()
p = multiprocessing.Process(target=serve, args=(q, 0.002, 0.0), daemon=True); p.start()
addr = f"127.0.0.1:{q.get()}"
sched = ServiceProcess("scheduler", ServiceProcess.cli_argv("scheduler", "--model", model, "--executor", addr, "--port", "0"))
server = sched.start(SCHEDULER_LISTENING, 120)
for with_hostile in (False, True, False, True):
    print(asyncio.run(main(server, with_hostile)), flush=True)
sched.stop(); p.kill()
