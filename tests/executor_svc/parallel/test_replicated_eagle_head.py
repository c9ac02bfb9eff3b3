"""An EAGLE-style head under tensor parallelism, over two gloo ranks on the CPU: each rank's replicated head
reads the whole embedding and the draft vocabulary's LM-head rows (gathered from the ranks' vocabulary
slices), and every rank takes rank 0's drafts. Through the stack: tests/stack/test_tensor_parallel.py."""

from __future__ import annotations

import torch
from gloo_ranks import results_on_ranks

from executor_svc.config import ExecutorConfig
from executor_svc.parallel.tensor_parallel import TensorParallel
from executor_svc.server import build_runner


def _what_the_rank_holds(tp: TensorParallel, model_dir: str, eagle_dir: str) -> dict:
    config = ExecutorConfig(model_dir=model_dir, num_kv_blocks=40, spec_method="eagle", eagle_dir=eagle_dir)
    runner, description = build_runner(config, tp=tp)
    step_model = runner.drafter.step_model
    own_drafts = torch.tensor([10 * tp.rank + 1, 10 * tp.rank + 2, 10 * tp.rank + 3])
    return {"spec_method": description.spec_method, "embed_shard_rows": runner.model.embed_weight.shape[0],
            "embed": step_model.embed.clone(), "lm_rows": step_model.lm_rows.clone(),
            "drafts": tp.broadcast_from_first(own_drafts).tolist()}


def test_each_rank_holds_the_whole_shared_tensors_and_takes_rank_0s_drafts(tiny_model_dir, tiny_eagle_dir, tmp_path):
    single, _ = build_runner(ExecutorConfig(model_dir=str(tiny_model_dir), num_kv_blocks=40, spec_method="eagle",
                                            eagle_dir=str(tiny_eagle_dir)))
    found = results_on_ranks(_what_the_rank_holds, (str(tiny_model_dir), str(tiny_eagle_dir)), tmp_path)
    vocab = single.model.embed_weight.shape[0]
    for rank_found in found:
        assert rank_found["spec_method"] == "eagle"
        assert rank_found["embed_shard_rows"] == vocab // 2  # the target itself stays sharded
        assert torch.equal(rank_found["embed"], single.drafter.step_model.embed)
        assert torch.equal(rank_found["lm_rows"], single.drafter.step_model.lm_rows)
        assert rank_found["drafts"] == [1, 2, 3]
