"""Predicted outputs on an editing task: the default model asked to add type hints to short stdlib functions,
greedy, c=1, the function itself as the prediction vs no prediction, alternating per round on one server; per spec
method (the default eagle_ngram and none). Checks the outputs are identical with and without the prediction and
prints tok/s, prediction tokens accepted / rejected, then medians and the ratio.

    python3 bench/experiments/predicted_outputs.py ROUNDS NUM_FUNCTIONS
"""
import ast
import inspect
import statistics
import sys
import time

from client import Client
from client.stack import LocalStack
from client.model_resolver import resolve_model

MODULES = ("textwrap", "shlex", "fnmatch", "colorsys", "bisect", "glob", "string", "calendar")
PROMPT = ("Rewrite this Python function with type hints added to its signature. Keep every other line exactly as "
          "it is.\n\n```python\n{code}\n```")


def functions(count: int, max_chars: int = 700) -> list[str]:
    found = []
    for name in MODULES:
        source = inspect.getsource(__import__(name))
        lines = source.splitlines()
        for node in ast.parse(source).body:
            if isinstance(node, ast.FunctionDef) and node.end_lineno:
                code = "\n".join(lines[node.lineno - 1 : node.end_lineno])
                if 200 <= len(code) <= max_chars:
                    found.append(code)
                    break
    return found[:count]


def one_pass(client: Client, codes: list[str], predict: bool) -> tuple[float, int, int, list[list[int]]]:
    tokens, accepted, rejected, outputs = 0, 0, 0, []
    start = time.perf_counter()
    for code in codes:
        result = client.generate(messages=[{"role": "user", "content": PROMPT.format(code=code)}], max_tokens=256,
                                 temperature=0.0, prediction=f"```python\n{code}\n```" if predict else None)
        tokens += len(result.token_ids)
        accepted += result.usage.accepted_prediction_tokens
        rejected += result.usage.rejected_prediction_tokens
        outputs.append(list(result.token_ids))
    return tokens / (time.perf_counter() - start), accepted, rejected, outputs


rounds, count = int(sys.argv[1]), int(sys.argv[2])
codes = functions(count)
model = str(resolve_model(None))
print(f"{len(codes)} functions, {rounds} rounds", flush=True)
for spec in ("eagle_ngram", "none"):
    rates: dict[bool, list[float]] = {False: [], True: []}
    with LocalStack(model, ["--spec-method", "auto" if spec == "eagle_ngram" else spec, "--num-threads", "2"],
                    []) as stack, Client(stack.address) as client:
        baseline = None
        for r in range(rounds):
            for predict in ((False, True) if r % 2 == 0 else (True, False)):
                rate, accepted, rejected, outputs = one_pass(client, codes, predict)
                baseline = baseline or outputs
                same = outputs == baseline
                rates[predict].append(rate)
                print(f"{spec} round {r} prediction={predict}: {rate:.1f} tok/s, accepted {accepted}, "
                      f"rejected {rejected}, outputs identical to round 0 without: {same}", flush=True)
                if not same:
                    sys.exit("outputs differ")
    with_p, without = statistics.median(rates[True]), statistics.median(rates[False])
    print(f"{spec}: median {without:.1f} tok/s without, {with_p:.1f} with the prediction: {with_p / without:.2f}x",
          flush=True)
