"""An EAGLE-style head under tensor parallelism, over two gloo ranks on the CPU: each rank's replicated head
reads the whole embedding and the draft vocabulary's LM-head rows (gathered from the ranks' vocabulary
slices), and every rank takes rank 0's drafts; the step profile, which times eagle_ngram drafting with the head
alone, runs on both ranks in step. Through the stack: tests/stack/test_tensor_parallel.py."""

from __future__ import annotations

import torch
from gloo_ranks import results_on_ranks

from executor_svc.config import ExecutorConfig
from executor_svc.parallel.tensor_parallel import TensorParallel
from executor_svc.profile_service import run_profile
from executor_svc.server import build_runner
from stepahead_proto import executor_pb2


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


def _profile_on_rank(tp: TensorParallel, model_dir: str, eagle_dir: str) -> dict:
    config = ExecutorConfig(model_dir=model_dir, num_kv_blocks=200, spec_method="eagle_ngram", eagle_dir=eagle_dir,
                            num_spec_tokens=2)
    runner, description = build_runner(config, tp=tp)
    request = executor_pb2.ProfileRequest(batch_sizes=[1, 2], context_len=16, repeats=2, calibration_max_tokens=6)
    for ids in ([5, 6, 7, 8, 9, 10, 11, 12], [20, 21, 22, 20, 21, 22]):
        request.calibration_prompts.add(ids=ids)
    profile = run_profile(runner, description, request)  # as the mirrored "profile" command runs it on every rank
    return {"rows": [len(row.step_ms) for row in profile.rows], "prior": list(profile.acceptance_prior),
            "drafter": type(runner.drafter).__name__, "requests": len(runner.requests)}


def test_the_step_profile_with_eagle_ngram_runs_on_both_ranks_in_step(tiny_model_dir, tiny_eagle_dir, tmp_path):
    found = results_on_ranks(_profile_on_rank, (str(tiny_model_dir), str(tiny_eagle_dir)), tmp_path)
    assert found[0]["rows"] == [3, 3] and found[0]["prior"] == found[1]["prior"]
    assert all(rank["drafter"] == "EagleNgramDrafter" and rank["requests"] == 0 for rank in found)
