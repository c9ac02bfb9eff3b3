"""Exploratory: random combinations of serving settings on a tiny checkpoint must not change greedy output.

Every feature's own tests pin its combinations one axis at a time; this draws whole configurations at random
(drafter and K, running ahead, multi-step, chunk budget, a KV pool small enough to preempt, prefix caching,
stream interval, batch width, staggered arrivals, the scheduling policy with requests' priorities) and checks each
against a plain synchronous stack: the same greedy tokens for every request (several share long prefixes, two are
constrained by a regex and a JSON object, one has bad words, one allowed token ids; several run with one of two LoRA
adapters, which every stack serves, two of them sharing a prefix with base-model requests), every KV block free
afterwards, no error.

    PYTHONPATH=.:tests:tests/executor_svc:tests/scheduler_svc:tests/fixtures \
        python3 bench/experiments/config_combinations.py N SEED [default|moe|FAMILY]

``default``: the real default model with its shipped head instead of the tiny checkpoint (no draft model).
``moe``: a tiny Qwen2-MoE checkpoint (routed experts, a shared expert) as the target; its adapters adapt the
attention only (what LoRA serves on MoE models). ``FAMILY``: the target from tiny_models' ``make_tiny_FAMILY``
(``cohere2``, ``phi2``, ``olmo2``, ...), its adapters on q and v only (every family names those alike); no EAGLE head
for latent-attention and attention-sink families, no adapters for latent-attention ones.
"""
import random
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from tiny_drafter_training import train_tiny_drafter
from tiny_adapters import make_peft_adapter
from tiny_models import make_tiny_llama, make_tiny_qwen2_moe
from tiny_tokenizers import build_byte_level

from client import Client
from client.stack import LocalStack

MAX_TOKENS = 40
PROFILE_DIR = Path(".")  # set in main: the step profiles dynamic K measures once per drafter and K_max
SAMPLED = 3
"""Seeded sampled requests sent beside the greedy ones (temperature 0.8, top-p 0.9, seeds 8-10): reproducible
per request in any batch, so equal to the reference without speculation; with a drafter only their
distribution is kept (rejection sampling draws differently), so there they are not compared."""


def tiny_model(root: Path, name: str, seed: int, family: str = "llama") -> Path:
    import tiny_models

    directory = root / name
    directory.mkdir()
    build_byte_level(directory)
    make = make_tiny_qwen2_moe if family == "moe" else getattr(tiny_models, f"make_tiny_{family}")
    make(directory, seed=seed, vocab_size=400)
    return directory


def prompts() -> list[list[int]]:
    rng = random.Random(11)
    shared = [rng.randrange(3, 400) for _ in range(70)]
    fresh = [[rng.randrange(3, 400) for _ in range(n)] for n in (5, 33, 90, 120, 3)]
    return fresh + [shared + [rng.randrange(3, 400) for _ in range(n)] for n in (1, 9, 30)]


FORMATS = {1: {"regex": r"[0-9]{2,5}-[a-z]{2,9}!"}, 3: {"json_object": True},
           2: {"bad_words": [*"abcdefghijklmnopqrstuvwxyz", "the dog", "quick brown"]},
           4: {"allowed_token_ids": list(range(100, 300))}}
"""Greedy requests constrained to a format or restricted by bad words or allowed token ids (by index): their tokens
must match the reference too."""
ADAPTER_OF = {0: "one", 1: "two", 6: "one", 7: "two", 8: "one"}
"""The LoRA adapter each request (by index; sampled ones too) names as its model."""
NO_EAGLE = {"deepseek_v2", "deepseek_v3", "glm4_moe_lite", "mistral4", "gpt_oss", "llama4"}
"""Families EAGLE-style drafters are refused for (latent attention, attention sinks)."""
NO_LORA = {"deepseek_v2", "deepseek_v3", "glm4_moe_lite", "mistral4", "qwen3_vl_moe_vision"}
"""Families LoRA is refused for (latent attention, vision-language checkpoints): their requests name no adapter."""
ADAPTERS = True


def run_all(address: str, stagger_s: float, counts: dict | None = None,
            prioritised: bool = False) -> list[tuple[int, ...]]:
    def one(index: int) -> tuple[int, ...]:
        time.sleep(index * stagger_s)
        sampled = index >= len(prompts())
        params = dict(temperature=0.8, top_p=0.9, seed=index) if sampled else dict(temperature=0.0)
        params.update(FORMATS.get(index, {}))
        if prioritised:
            params["priority"] = index % 3 - 1
        with Client(address) as client:
            result = client.generate(token_ids=prompts()[index % len(prompts())], max_tokens=MAX_TOKENS,
                                     ignore_eos=True, model=ADAPTER_OF.get(index, "") if ADAPTERS else "", **params)
        assert result.finish_reason == "length", result
        if counts is not None:
            counts["preemptions"] = counts.get("preemptions", 0) + result.usage.num_preemptions
            counts["cached"] = counts.get("cached", 0) + result.usage.cached_prompt_tokens
        return result.token_ids

    total = len(prompts()) + SAMPLED
    with ThreadPoolExecutor(total) as pool:
        return list(pool.map(one, range(total)))


def draw(rng: random.Random, drafts: dict[str, list[str]]) -> tuple[list[str], list[str], float, int]:
    method = rng.choice(list(drafts))
    executor = ["--num-threads", "1", *drafts[method]]
    scheduler = []
    if method != "none":
        k = rng.choice(["1", "2", "3", "4", "dynamic"])
        executor += ["--num-spec-tokens", "4" if k == "dynamic" else k]
        if k == "dynamic":
            scheduler += ["--num-spec-tokens", "dynamic", "--spec-profile-dir", str(PROFILE_DIR)]
    executor += rng.choice([[], [], ["--tensor-parallel-size", "2"]])
    executor += rng.choice([[], ["--num-kv-blocks", "24"], ["--num-kv-blocks", "40"]])
    scheduler += ["--max-inflight-steps", rng.choice(["1", "2", "3"])]
    scheduler += ["--num-scheduler-steps", rng.choice(["1", "1", "3"])]
    scheduler += ["--max-num-batched-tokens", rng.choice(["32", "64", "512"])]
    scheduler += ["--max-num-seqs", rng.choice(["2", "3", "8"])]
    scheduler += ["--stream-interval", rng.choice(["1", "3"])]
    scheduler += [rng.choice(["--enable-prefix-caching", "--no-enable-prefix-caching"])]
    scheduler += ["--scheduling-policy", rng.choice(["fcfs", "priority"])]
    return executor, scheduler, rng.choice([0.0, 0.0, 0.03]), rng.choice([1, 1, 1, 2])


def free_blocks(address: str) -> tuple[int, int]:
    with Client(address) as client:
        info = client.model_info()
    return info.num_free_kv_blocks, info.num_kv_blocks


def main() -> None:
    count, seed = int(sys.argv[1]), int(sys.argv[2])
    root = Path(tempfile.mkdtemp(prefix="combos-"))
    global PROFILE_DIR
    PROFILE_DIR = root / "profiles"
    if "default" in sys.argv[3:]:
        from client.model_resolver import resolve_model

        model = resolve_model(None)
        drafts = {"none": ["--spec-method", "none"], "ngram": ["--spec-method", "ngram"],
                  "eagle": ["--spec-method", "eagle"], "eagle_ngram": ["--spec-method", "eagle_ngram"]}
    else:
        family = sys.argv[3] if len(sys.argv) > 3 else "llama"
        model, other = tiny_model(root, "target", 0, family), tiny_model(root, "draft", 1)
        drafts = {"none": ["--spec-method", "none"], "ngram": ["--spec-method", "ngram"],
                  "draft_model": ["--spec-method", "draft_model", "--draft-model", str(other)]}
        if family not in NO_EAGLE:
            eagle = root / "eagle"
            train_tiny_drafter(model, eagle)
            drafts |= {"eagle": ["--spec-method", "eagle", "--eagle-drafter", str(eagle)],
                       "eagle_ngram": ["--spec-method", "eagle_ngram", "--eagle-drafter", str(eagle)]}
    pool = ["--num-kv-blocks", "256"] if "default" in sys.argv[3:] else ["--kv-cache-memory-gb", "0.02"]
    family = sys.argv[3] if len(sys.argv) > 3 else "llama"
    one_targets = {"llama": None, "default": None, "moe": ["q_proj", "k_proj", "v_proj", "o_proj"]}.get(
        family, ["q_proj", "v_proj"])
    global ADAPTERS
    ADAPTERS = family not in NO_LORA
    lora = ["--lora-modules",
            f"one={make_peft_adapter(model, root / 'one', seed=1, scale=0.1, target_modules=one_targets)}",
            f"two={make_peft_adapter(model, root / 'two', seed=2, rank=8, target_modules=['q_proj', 'v_proj'])}"
            ] if ADAPTERS else []
    pool += lora
    base = LocalStack(str(model), ["--num-threads", "1", "--spec-method", "none", *pool],
                      ["--max-inflight-steps", "1"])
    base.start()
    try:
        reference = run_all(base.address, 0.0)
    finally:
        base.stop()
    assert set(reference[4]) <= set(FORMATS[4]["allowed_token_ids"]), reference[4]
    rng = random.Random(seed)
    failures = 0
    for index in range(count):
        executor, scheduler, stagger, groups = draw(rng, drafts)
        executor += pool if "--num-kv-blocks" not in executor else lora
        stack = LocalStack(str(model), executor, scheduler, executor_groups=groups)
        started = time.monotonic()
        try:
            stack.start()
            counts: dict = {}
            outputs = run_all(stack.address, stagger, counts, prioritised="priority" in scheduler)
            free = free_blocks(stack.address)
            compared = len(outputs) if "none" in executor else len(prompts())
            mismatched = [i for i, (a, b) in enumerate(zip(outputs[:compared], reference)) if a != b]
            ok = not mismatched and free[0] == free[1]
            verdict = f"ok ({counts})" if ok else f"MISMATCH requests {mismatched}, free blocks {free}"
        except Exception as error:  # noqa: BLE001 - an exploratory run reports every failure and goes on
            ok, verdict = False, f"ERROR {type(error).__name__}: {error}"
            print(stack.executors[0].log()[-3000:] if stack.executors else "", file=sys.stderr)
        finally:
            stack.stop()
        failures += not ok
        print(f"{index:3d} {time.monotonic() - started:5.1f}s stagger {stagger} groups {groups} "
              f"{' '.join(executor[2:])} | "
              f"{' '.join(scheduler)}: {verdict}", flush=True)
    print(f"{count - failures} of {count} configurations gave the reference output")


if __name__ == "__main__":
    main()
