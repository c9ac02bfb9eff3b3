"""LoRA adapters under tensor parallelism over two gloo ranks on the CPU: each rank stacks its shard of every
adapter (B's rows for column-parallel projections, A's columns for row-parallel ones) and the requests get the
tokens of the unsharded executor, adapters and base rows mixed in one batch, with KV-head groups split unevenly."""

from __future__ import annotations

from gloo_ranks import results_on_ranks
from step_plans import BATCHES, GREEDY, PlannedRequest, plan_steps, with_blocks
from tiny_adapters import make_peft_adapter
from tiny_models import make_tiny_llama

from executor_svc.config import ExecutorConfig
from executor_svc.parallel.tensor_parallel import TensorParallel
from executor_svc.server import build_runner

PROMPTS = {"a": [5, 9, 11, 3, 17], "b": [2, 40, 41, 42, 7, 8, 9], "c": [100, 3, 4], "d": list(range(20, 40))}
ADAPTER_OF = {"a": "", "b": "one", "c": "two", "d": "one"}


def _tokens(tp: TensorParallel, model_dir: str, modules: tuple[str, ...], loaded_later: bool = False
            ) -> dict[str, list[int]]:
    """Each request's tokens; ``loaded_later``: the executor starts with two free slots and loads the adapters."""
    if loaded_later:
        runner, _ = build_runner(ExecutorConfig(model_dir=model_dir, num_kv_blocks=40, max_loras=2), tp=tp)
        for name, _, path in (module.partition("=") for module in modules):
            assert runner.load_lora_adapter(name, path).code == "OK"
    else:
        runner, _ = build_runner(ExecutorConfig(model_dir=model_dir, num_kv_blocks=40, lora_modules=modules), tp=tp)
    requests = with_blocks({rid: PlannedRequest(prompt, GREEDY, lora_adapter=ADAPTER_OF[rid])
                            for rid, prompt in PROMPTS.items()})
    tokens: dict[str, list[int]] = {}
    for step in plan_steps(requests, BATCHES):
        for output in runner.execute(step).outputs:
            tokens.setdefault(output.request_id, []).extend(output.token_ids)
    return tokens


def test_two_ranks_serve_the_adapters_tokens_of_one(tmp_path):
    # 3 KV heads over 2 ranks: the q/k/v shards of B are uneven (2 groups + 1)
    model_dir = make_tiny_llama(tmp_path / "model", seed=5, hidden_size=96, num_attention_heads=6,
                                num_key_value_heads=3)
    one = make_peft_adapter(model_dir, tmp_path / "one", seed=1)
    two = make_peft_adapter(model_dir, tmp_path / "two", seed=2, rank=2, target_modules=["o_proj", "down_proj"])
    modules = (f"one={one}", f"two={two}")
    single = _tokens(TensorParallel(0, 1), str(model_dir), modules)
    per_rank = results_on_ranks(_tokens, (str(model_dir), modules), tmp_path)
    assert per_rank[0] == per_rank[1] == single
    (tmp_path / "later").mkdir()
    loaded_later = results_on_ranks(_tokens, (str(model_dir), modules, True), tmp_path / "later")
    assert loaded_later[0] == loaded_later[1] == single
