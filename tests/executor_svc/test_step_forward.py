"""The model runner with captured step graphs (a CPU stand-in that re-runs the captured forward at each
replay) gives the tokens of eager execution: plain, run ahead with deferred read-back, and verifying
drafts; decode and verify steps replay, prefills run eagerly; a deferred decode step syncs nothing."""

from __future__ import annotations

import os

import pytest
import torch
from host_syncs import recorded_host_syncs
from step_plans import BATCHES, plan_steps, requests_plain
from tiny_models import make_tiny_llama

from executor_svc.attention.torch_backend import TorchAttentionBackend
from executor_svc.config import ExecutorConfig
from executor_svc.cuda_graphs.step_graphs import EagerStandIn
from executor_svc.drafters.eagle_head import EagleHead, EagleHeadConfig, save_head
from executor_svc.model_loader import load_hf_config
from executor_svc.server import build_runner
from stepahead_proto import executor_pb2, sampling_pb2

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")  # before triton is imported: kernels run on the CPU


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return make_tiny_llama(tmp_path_factory.mktemp("target"), seed=3)


def eager_runner(model_dir, **overrides):
    config = ExecutorConfig(model_dir=str(model_dir), num_kv_blocks=40, **overrides)
    return build_runner(config)[0]


def graphed_runner(model_dir, backend="torch_padded", **overrides):
    config = ExecutorConfig(
        model_dir=str(model_dir), num_kv_blocks=40, attention_backend=backend, max_num_seqs=4, **overrides
    )
    return build_runner(config, make_capture=EagerStandIn)[0]


def tokens_and_logprobs(result: executor_pb2.StepResult) -> list[tuple[str, list[int], tuple[int, int], list[float]]]:
    """Per output: request id, tokens, (drafted, accepted) counts (equal drafts verify alike), logprobs."""
    return [(o.request_id, list(o.token_ids), (o.num_drafted, o.num_accepted), [p.sampled.logprob for p in o.logprobs])
            for o in result.outputs]


def assert_same_outputs(actual, expected) -> None:
    def heads(steps):
        return [[output[:3] for output in step] for step in steps]

    assert heads(actual) == heads(expected)
    for got_step, want_step in zip(actual, expected):
        for got, want in zip(got_step, want_step):
            assert got[3] == pytest.approx(want[3], abs=1e-4)


def recorded_proposals(runner) -> list[list[list[int]]]:
    """Every proposal the runner's drafter makes from now on (its drafts per request of the batch)."""
    proposals: list[list[list[int]]] = []
    propose = runner.drafter.propose

    def record(batch):
        proposals.append(propose(batch))
        return proposals[-1]

    runner.drafter.propose = record
    return proposals


def run_ahead(runner, steps, lag: int):
    launched, results = [], []
    for step in steps:
        launched.append(runner.launch(step))
        if len(launched) > lag:
            results.append(tokens_and_logprobs(runner.complete(launched[len(results)])))
    return results + [tokens_and_logprobs(runner.complete(step)) for step in launched[len(results) :]]


@pytest.mark.parametrize("defer, lag", [(False, 0), (True, 2)])
def test_replayed_steps_give_the_tokens_of_eager_steps(model_dir, defer, lag):
    steps = plan_steps(requests_plain(), BATCHES)
    eager = eager_runner(model_dir)
    expected = [tokens_and_logprobs(eager.execute(step)) for step in steps]
    runner = graphed_runner(model_dir, defer_token_readback=defer)
    assert_same_outputs(run_ahead(runner, steps, lag), expected)
    decode_steps = sum(1 for step in steps if not step.new_requests)
    assert runner.forward.num_replays == decode_steps  # every pure decode replays; steps with a prefill do not


def test_verify_steps_replay_in_the_shape_of_their_query_length(model_dir):
    requests = requests_plain()
    requests["b"].num_spec = 2
    requests["d"].num_spec = 2
    steps = plan_steps(requests, BATCHES)
    eager = eager_runner(model_dir, spec_method="ngram", num_spec_tokens=2)
    expected = [tokens_and_logprobs(eager.execute(step)) for step in steps]
    runner = graphed_runner(model_dir, spec_method="ngram", num_spec_tokens=2)
    assert runner.forward.graphs is not None
    assert max(shape.query_len for shape in runner.forward.graphs.shapes) == 3
    assert_same_outputs(run_ahead(runner, steps, 0), expected)
    assert runner.forward.num_replays > 0


def test_a_batch_larger_than_the_largest_graph_runs_eagerly(model_dir):
    runner = graphed_runner(model_dir)
    prompts = {f"r{i}": [3 + i, 4, 5] for i in range(6)}  # 6 sequences > max_num_seqs 4
    step = executor_pb2.StepRequest(step_id=0)
    for index, (rid, prompt) in enumerate(prompts.items()):
        greedy = sampling_pb2.SamplingParams(temperature=0.0)
        step.new_requests.add(request_id=rid, prompt_token_ids=prompt, num_scheduled_tokens=len(prompt),
                              sampling=greedy, block_ids=[2 * index, 2 * index + 1])
    runner.execute(step)
    decode = executor_pb2.StepRequest(step_id=1)
    for rid in prompts:
        decode.cached_requests.add(request_id=rid, num_computed_tokens=3, num_scheduled_tokens=1)
    result = runner.execute(decode)
    assert len(result.outputs) == 6 and runner.forward.num_replays == 0


def test_a_deferred_decode_step_waits_for_nothing_on_the_host(model_dir):
    runner = graphed_runner(model_dir, defer_token_readback=True)
    requests = {rid: request for rid, request in requests_plain().items() if rid in ("a", "b")}
    steps = plan_steps(requests, [["a", "b"], ["a", "b"], ["a", "b"]])
    runner.launch(steps[0])
    runner.launch(steps[1])
    with recorded_host_syncs() as syncs:
        runner.launch(steps[2])
    assert syncs == []
    assert runner.forward.num_replays == 2


@pytest.fixture(scope="module")
def draft_dir(tmp_path_factory):
    return make_tiny_llama(tmp_path_factory.mktemp("draft"), seed=4)


def test_draft_model_decode_steps_replay_and_draft_what_eager_drafts(model_dir, draft_dir):
    requests = requests_plain()
    requests["a"].num_spec = 3
    requests["b"].num_spec = 1  # fewer drafts than a (batched with it): the draft batch shrinks
    steps = plan_steps(requests, BATCHES)
    spec = {"spec_method": "draft_model", "draft_model_dir": str(draft_dir), "num_spec_tokens": 3}
    eager = eager_runner(model_dir, **spec)
    eager_drafts = recorded_proposals(eager)
    expected = [tokens_and_logprobs(eager.execute(step)) for step in steps]
    runner = graphed_runner(model_dir, **spec)
    drafts = recorded_proposals(runner)
    assert_same_outputs(run_ahead(runner, steps, 0), expected)
    assert drafts == eager_drafts
    assert runner.drafter.num_replays > 0
    assert runner.forward.num_replays > 0


@pytest.fixture(scope="module")
def eagle_dir(model_dir, tmp_path_factory):
    """A random EAGLE-style head for the target (a draft vocabulary of 64 of its tokens), strong enough that its
    drafts vary from token to token."""
    config = load_hf_config(model_dir)
    head = EagleHead(config, 64, TorchAttentionBackend())
    head.initialise(5)
    with torch.no_grad():
        head.fc_weight.normal_(0, 0.3, generator=torch.Generator().manual_seed(5))
        head.draft_vocab.copy_(torch.randperm(config.vocab_size, generator=torch.Generator().manual_seed(5))[:64])
    out = tmp_path_factory.mktemp("eagle")
    save_head(head, EagleHeadConfig.for_target(config, 64), out)
    return out


def eagle_of(drafter):
    """The EAGLE-style drafter itself, or the one eagle_ngram wraps."""
    return getattr(drafter, "eagle", drafter)


def count_lookup_matches(runner) -> list[int]:
    """A one-element list counting the eagle_ngram lookups that found a match from now on."""
    matches = [0]
    propose = runner.drafter.ngram.propose

    def counted(batch):
        proposals = propose(batch)
        matches[0] += sum(bool(drafts) for drafts in proposals)
        return proposals

    runner.drafter.ngram.propose = counted
    return matches


@pytest.mark.parametrize(("backend", "method"), [("torch_padded", "eagle"), ("triton", "eagle"),
                                                 ("torch_padded", "eagle_ngram")])
def test_eagle_draft_steps_replay_and_draft_what_eager_drafts(model_dir, eagle_dir, backend, method):
    """eagle_ngram: some proposals come from the lookup, the rest from the head replaying its graphs after
    catching up over the lookup-drafted tokens."""
    if backend == "triton":
        pytest.importorskip("triton")
    requests = requests_plain()
    requests["a"].num_spec = 3
    requests["b"].num_spec = 1  # the draft batch shrinks after the first draft
    requests["a"].prompt = [5, 9, 11, 5, 9]  # ends in a repeat: its first drafts are the lookup's (11, 5, 9)
    steps = plan_steps(requests, BATCHES)
    spec = {"spec_method": method, "eagle_dir": str(eagle_dir), "num_spec_tokens": 3}
    eager = eager_runner(model_dir, **spec)
    eager_drafts = recorded_proposals(eager)
    expected = [tokens_and_logprobs(eager.execute(step)) for step in steps]
    runner = graphed_runner(model_dir, backend, **spec)
    drafts = recorded_proposals(runner)
    matches = count_lookup_matches(runner) if method == "eagle_ngram" else [1]
    assert_same_outputs(run_ahead(runner, steps, 0), expected)
    assert drafts == eager_drafts and any(len(d) == 3 for proposal in drafts for d in proposal)
    assert eagle_of(runner.drafter).num_replays > 0 and eagle_of(eager.drafter).num_replays == 0
    assert matches[0] > 0


def test_the_triton_backend_replays_run_ahead_steps_to_the_eager_tokens(model_dir):
    pytest.importorskip("triton")
    steps = plan_steps(requests_plain(), BATCHES)
    eager = eager_runner(model_dir)
    expected = [tokens_and_logprobs(eager.execute(step)) for step in steps]
    runner = graphed_runner(model_dir, backend="triton", defer_token_readback=True)
    assert_same_outputs(run_ahead(runner, steps, 2), expected)
    assert runner.forward.num_replays > 0


CUDA_SPECS = {"plain": {}, "draft_model": {"spec_method": "draft_model", "num_spec_tokens": 3},
              "eagle": {"spec_method": "eagle", "num_spec_tokens": 3},
              "eagle_ngram": {"spec_method": "eagle_ngram", "num_spec_tokens": 3}}


@pytest.mark.gpu
@pytest.mark.parametrize("spec_name", sorted(CUDA_SPECS))
def test_cuda_graphs_replay_to_the_tokens_of_eager_cuda_steps(model_dir, draft_dir, eagle_dir, spec_name):
    """On CUDA, the runner as served (auto backend, captured CUDA graphs for the target and the drafter, run
    ahead with deferred read-back) gives the tokens and acceptance of an eager runner with the torch backend."""
    spec = dict(CUDA_SPECS[spec_name])
    requests = requests_plain()
    if spec_name == "draft_model":
        spec["draft_model_dir"] = str(draft_dir)
    if spec_name.startswith("eagle"):
        spec["eagle_dir"] = str(eagle_dir)
    if spec:
        requests["a"].num_spec = 3
        requests["b"].num_spec = 1
    steps = plan_steps(requests, BATCHES)
    cuda = {"device": "cuda", "dtype": "float32", "num_kv_blocks": 40, **spec}
    eager = build_runner(ExecutorConfig(model_dir=str(model_dir), enforce_eager=True, attention_backend="torch",
                                        **cuda))[0]
    runner = build_runner(ExecutorConfig(model_dir=str(model_dir), max_num_seqs=4, **cuda))[0]
    eager_drafts, drafts = (recorded_proposals(r) if spec else [] for r in (eager, runner))
    expected = [tokens_and_logprobs(eager.execute(step)) for step in steps]
    assert_same_outputs(run_ahead(runner, steps, 0 if spec else 2), expected)
    assert drafts == eager_drafts
    assert runner.forward.num_replays > 0
    if spec:
        assert eagle_of(runner.drafter).num_replays > 0
