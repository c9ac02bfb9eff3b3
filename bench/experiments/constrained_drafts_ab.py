"""Drafts of constrained requests shaped by their format (forced tokens drafted, forbidden drafts cut) against the
drafter's drafts as they come, A/B through the stack on the default model.

BASE is a commit before the change; its tree is checked out to /tmp and the executor (and scheduler) of the
baseline rounds import it (PYTHONPATH), the current tree serves the others. Rounds alternate. Each round: the
served default (eagle_ngram, dynamic K: the scheduler's `--num-spec-tokens dynamic`) or a fixed K (`--num-spec-tokens K`), 16 MT-Bench first turns asking for
JSON under a schema (and one asking for a person as JSON), greedy, c=1, 160 tokens. Outputs are compared between
the variants (must be identical), and drafted / accepted / tokens per verify step / tok/s are reported.
    PYTHONPATH=.:proto python3 bench/experiments/constrained_drafts_ab.py BASE ROUNDS [K]"""
import asyncio, os, statistics, subprocess, sys, time
from pathlib import Path
from client import AsyncClient
from client.model_resolver import resolve_model
from client.mtbench import load_mtbench_first_turns
from client.stack import LocalStack

SCHEMA = {"type": "object", "properties": {"answer": {"type": "string", "maxLength": 600},
                                           "confidence": {"type": "integer", "minimum": 0, "maximum": 100}},
          "required": ["answer", "confidence"], "additionalProperties": False}
PERSON = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 40},
                                           "age": {"type": "integer", "minimum": 0, "maximum": 120},
                                           "city": {"type": "string", "maxLength": 40}},
          "required": ["name", "age", "city"], "additionalProperties": False}

def requests():
    asks = [(p + " Reply in JSON with an answer and a confidence.", SCHEMA) for p in load_mtbench_first_turns()[:16]]
    return asks + [("Describe a fictional person as JSON with name, age and city.", PERSON)]

async def run_all(address):
    outs = []
    async with AsyncClient(address) as client:
        for prompt, schema in requests():
            result = await client.generate(messages=[{"role": "user", "content": prompt}], max_tokens=160,
                                           temperature=0.0, json_schema=schema)
            outs.append(result)
    return outs

def one_round(tree: Path, model_dir: Path, k: str | None):
    env = dict(os.environ, PYTHONPATH=f"{tree}:{tree}/proto")
    flags = ["--num-threads", "2"] + (["--num-spec-tokens", k] if k else [])
    stack = LocalStack(str(model_dir), flags, [] if k else ["--num-spec-tokens", "dynamic"], env=env)
    here = os.getcwd()
    os.chdir(tree)  # `python -m` puts the working directory first on sys.path, before PYTHONPATH
    try:
        stack.start(timeout_s=600)
    finally:
        os.chdir(here)
    try:
        asyncio.run(run_all(stack.address))  # warm-up: compile the schemas, first steps
        start = time.perf_counter()
        outs = asyncio.run(run_all(stack.address))
        wall = time.perf_counter() - start
    finally:
        stack.stop()
    tokens = sum(len(o.token_ids) for o in outs)
    drafted = sum(o.spec.drafted for o in outs if o.spec)
    accepted = sum(o.spec.accepted for o in outs if o.spec)
    return outs, tokens / wall, tokens, drafted, accepted

def main():
    base, rounds = sys.argv[1], int(sys.argv[2])
    k = sys.argv[3] if len(sys.argv) > 3 else None
    here = Path(__file__).resolve().parents[2]
    old = Path("/tmp/constrained-drafts-base")
    if not old.exists():
        subprocess.run(["git", "-C", str(here), "worktree", "add", "--detach", str(old), base], check=True)
    model_dir = resolve_model(None)
    table, reference = {}, None
    for round_ in range(rounds):
        for name, tree in (("drafter as is", old), ("format-shaped", here)):
            outs, tps, tokens, drafted, accepted = one_round(tree, model_dir, k)
            ids = [list(o.token_ids) for o in outs]
            if reference is None:
                reference = ids
            same = ids == reference
            table.setdefault(name, []).append(tps)
            print(f"round {round_} {name:14s} K={k or 'dynamic'}: {tps:5.1f} tok/s, {tokens} tokens, drafted {drafted}, "
                  f"accepted {accepted} ({accepted / max(1, drafted):.2f}), outputs identical: {same}", flush=True)
    for name, values in table.items():
        print(f"median {name:14s}: {statistics.median(values):5.1f} tok/s ({', '.join(f'{v:.1f}' for v in values)})")

if __name__ == "__main__":
    main()
