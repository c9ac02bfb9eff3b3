"""Speculative sampling keeps the target's distribution when K changes from step to step (dynamic K):
the joint law of the first three generated tokens, over three steps whose K differs per step and per
request, matches the target's exact law; a broken acceptance rule is still caught."""

from __future__ import annotations

import pytest
import torch
from stats_helpers import chi_square_p_value
from test_spec_distribution import _accept_too_often
from tiny_models import make_tiny_llama

from executor_svc.config import ExecutorConfig
from executor_svc.server import build_runner
from stepahead_proto import executor_pb2, sampling_pb2

VOCAB = 8
PROMPT = [1, 2, 3]
ROUND = 3_000
K_MAX = 3
# (K proposed after the prefill, K proposed after the first verify): every round a different mix per request.
K_PATTERNS = [(3, 1), (1, 3), (0, 2), (2, 0), (3, 3)]


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    target = make_tiny_llama(tmp_path_factory.mktemp("target"), seed=0, vocab_size=VOCAB)
    drafter = make_tiny_llama(tmp_path_factory.mktemp("drafter"), seed=5, vocab_size=VOCAB)
    return target, drafter


def exact_joint_three(target_dir) -> torch.Tensor:
    """P(t1, t2, t3) under the target at temperature 1, from HF transformers."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(target_dir, dtype=torch.float32).eval()
    with torch.inference_mode():
        p1 = model(torch.tensor([PROMPT])).logits[0, -1].softmax(-1)
        p2 = model(torch.tensor([PROMPT + [a] for a in range(VOCAB)])).logits[:, -1].softmax(-1)
        rows = torch.tensor([PROMPT + [a, b] for a in range(VOCAB) for b in range(VOCAB)])
        p3 = model(rows).logits[:, -1].softmax(-1).view(VOCAB, VOCAB, VOCAB)
    return (p1[:, None, None] * p2[:, :, None] * p3).flatten()


def sample_first_three(target_dir, drafter_dir, rounds: int) -> tuple[torch.Tensor, int]:
    """Counts of (t1, t2, t3) and the drafts verified: prefill proposing K1, a verify of K1 proposing K2,
    a verify of K2; K1, K2 from K_PATTERNS, shifted by request and round."""
    config = ExecutorConfig(model_dir=str(target_dir), spec_method="draft_model", draft_model_dir=str(drafter_dir),
                            num_spec_tokens=K_MAX, num_kv_blocks=ROUND + 4, block_size=16)
    runner, _ = build_runner(config)
    counts = torch.zeros(VOCAB**3)
    drafted = 0
    for round_index in range(rounds):
        ids = [f"{round_index}-{i}" for i in range(ROUND)]
        ks = [K_PATTERNS[(i + round_index) % len(K_PATTERNS)] for i in range(ROUND)]
        prefill = executor_pb2.StepRequest(step_id=0, new_requests=[
            executor_pb2.NewRequestData(request_id=rid, prompt_token_ids=PROMPT, block_ids=[i],
                                        sampling=sampling_pb2.SamplingParams(temperature=1.0, top_p=1.0,
                                                                             seed=round_index * ROUND + i),
                                        num_scheduled_tokens=len(PROMPT), num_spec_tokens=k1)
            for i, (rid, (k1, _)) in enumerate(zip(ids, ks))])
        outputs = {o.request_id: list(o.token_ids) for o in runner.execute(prefill).outputs}
        for step_id, verify_k, propose_k in ((1, 0, 1), (2, 1, None)):
            step = executor_pb2.StepRequest(step_id=step_id)
            for rid, pattern in zip(ids, ks):
                state = runner.requests[rid]
                step.cached_requests.add(request_id=rid, num_computed_tokens=state.num_computed_tokens,
                                         num_scheduled_tokens=1, num_draft_tokens=pattern[verify_k],
                                         num_spec_tokens=0 if propose_k is None else pattern[propose_k])
            result = runner.execute(step)
            for output in result.outputs:
                outputs[output.request_id] += list(output.token_ids)
                drafted += output.num_drafted
        firsts = torch.tensor([outputs[rid][:3] for rid in ids])
        counts += torch.bincount(firsts[:, 0] * VOCAB**2 + firsts[:, 1] * VOCAB + firsts[:, 2],
                                 minlength=VOCAB**3).float()
        runner.execute(executor_pb2.StepRequest(step_id=3, finished_request_ids=ids))
    return counts, drafted


def test_changing_k_keeps_the_target_distribution(checkpoints):
    target, drafter = checkpoints
    counts, drafted = sample_first_three(target, drafter, rounds=3)
    assert counts.sum() == 3 * ROUND and drafted > 0
    assert chi_square_p_value(counts, exact_joint_three(target)) > 0.01


def test_a_broken_rule_is_detected_with_changing_k(checkpoints, monkeypatch):
    target, drafter = checkpoints
    _accept_too_often(monkeypatch)
    counts, _ = sample_first_three(target, drafter, rounds=3)
    assert chi_square_p_value(counts, exact_joint_three(target)) < 1e-4
