"""An EAGLE-style head under tensor parallelism, over two gloo ranks on the CPU: each rank's replicated head
reads the whole embedding and the draft vocabulary's LM-head rows (gathered from the ranks' vocabulary
slices), and every rank takes rank 0's drafts. Through the stack: tests/stack/test_tensor_parallel.py."""

from __future__ import annotations

import os
import pickle
import socket
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from executor_svc.config import ExecutorConfig
from executor_svc.parallel.tensor_parallel import TensorParallel
from executor_svc.server import build_runner

WORLD_SIZE = 2


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _rank_main(rank: int, port: int, model_dir: str, eagle_dir: str, out_path: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=WORLD_SIZE,
                            timeout=timedelta(seconds=120))
    try:
        tp = TensorParallel(rank, WORLD_SIZE)
        config = ExecutorConfig(model_dir=model_dir, num_kv_blocks=40, spec_method="eagle", eagle_dir=eagle_dir)
        runner, description = build_runner(config, tp=tp)
        step_model = runner.drafter.step_model
        own_drafts = torch.tensor([10 * rank + 1, 10 * rank + 2, 10 * rank + 3])
        found = {"spec_method": description.spec_method, "embed_shard_rows": runner.model.embed_weight.shape[0],
                 "embed": step_model.embed.clone(), "lm_rows": step_model.lm_rows.clone(),
                 "drafts": tp.broadcast_from_first(own_drafts).tolist()}
        with open(f"{out_path}.{rank}", "wb") as out:
            pickle.dump(found, out)
        dist.barrier()
    except BaseException:
        dist.destroy_process_group()
        raise
    os._exit(0)  # as in test_tensor_parallel_runner.py: skip gloo's teardown once both ranks are done


def test_each_rank_holds_the_whole_shared_tensors_and_takes_rank_0s_drafts(tiny_model_dir, tiny_eagle_dir, tmp_path):
    single, _ = build_runner(ExecutorConfig(model_dir=str(tiny_model_dir), num_kv_blocks=40, spec_method="eagle",
                                            eagle_dir=str(tiny_eagle_dir)))
    out_path = str(tmp_path / "found")
    mp.spawn(_rank_main, args=(_free_port(), str(tiny_model_dir), str(tiny_eagle_dir), out_path),
             nprocs=WORLD_SIZE, join=True)
    found = [pickle.loads(open(f"{out_path}.{rank}", "rb").read()) for rank in range(WORLD_SIZE)]
    vocab = single.model.embed_weight.shape[0]
    for rank_found in found:
        assert rank_found["spec_method"] == "eagle"
        assert rank_found["embed_shard_rows"] == vocab // WORLD_SIZE  # the target itself stays sharded
        assert torch.equal(rank_found["embed"], single.drafter.step_model.embed)
        assert torch.equal(rank_found["lm_rows"], single.drafter.step_model.lm_rows)
        assert rank_found["drafts"] == [1, 2, 3]
