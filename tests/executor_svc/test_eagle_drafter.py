"""The EAGLE-style drafter: its paged drafting equals the head's unrolled training forward, it catches up on
features across chunks and rejected drafts, and it loads only a head made for the target."""

from __future__ import annotations

import json

import pytest
import torch
from tiny_models import make_tiny_cohere, make_tiny_gemma2, make_tiny_granite, make_tiny_llama

from executor_svc.attention.padded_torch_backend import PaddedTorchAttentionBackend
from executor_svc.attention.torch_backend import TorchAttentionBackend
from executor_svc.cuda_graphs.step_graphs import EagerStandIn
from executor_svc.drafter_training.dataset import pack
from executor_svc.drafter_training.self_distill import DistillSequence
from executor_svc.drafter_training.unrolled import unrolled_forward
from executor_svc.drafters.base import DraftRequest
from executor_svc.drafters.eagle import EagleDrafter
from executor_svc.drafters.eagle_head import EagleHead, EagleHeadConfig, load_head, save_head
from executor_svc.drafters.shipped import target_probe
from executor_svc.host_batch import HostBatch
from executor_svc.host_transfer import host_list_to_device
from executor_svc.kv_cache import PagedKVCache
from executor_svc.model_loader import load_hf_config, load_model
from executor_svc.request_state import ExecutorRequestState
from executor_svc.sampling_metadata import RowSamplingParams

BLOCK = 4
K = 3


@pytest.fixture(scope="module")
def target(tmp_path_factory):
    directory = make_tiny_llama(tmp_path_factory.mktemp("target"), seed=3, vocab_size=64)
    config = load_hf_config(directory)
    return config, load_model(directory, torch.float32, "cpu", TorchAttentionBackend()), directory


def random_head(config, draft_vocab_size: int, seed: int = 7) -> EagleHead:
    head = EagleHead(config, draft_vocab_size, TorchAttentionBackend())
    head.initialise(seed)
    with torch.no_grad():  # a stronger random head than the training start, so drafts differ across tokens
        head.fc_weight.normal_(0, 0.3, generator=torch.Generator().manual_seed(seed))
    head.draft_vocab.copy_(torch.randperm(config.vocab_size, generator=torch.Generator().manual_seed(seed))
                           [:draft_vocab_size])
    return head


def target_features(model, tokens: list[int]) -> torch.Tensor:
    """The target's hidden states of every position of ``tokens`` (one prefill)."""
    cache = PagedKVCache(model.config.num_hidden_layers, 32, BLOCK, model.config.num_key_value_heads,
                         model.config.hidden_size // model.config.num_attention_heads, torch.float32, "cpu")
    host = HostBatch(BLOCK)
    host.add_sequence(tokens, 0, list(range(32)))
    ids, positions, meta = host.to_device(torch.device("cpu"))
    with torch.inference_mode():
        return model(ids, positions, meta, cache)


def feed(drafter, request_id: str, first: int, rows: torch.Tensor, blocks: list[int] | None = None) -> None:
    """As a target step that fed positions first .. first + len(rows) - 1 of the request (in ``blocks``, by
    default 0-7) would: ``rows`` are the target's hidden states there."""
    host = HostBatch(BLOCK)
    host.add_sequence([0] * rows.shape[0], first, list(range(8)) if blocks is None else blocks)
    drafter.observe(host, [request_id], rows, host_list_to_device(host.slot_mapping(), "cpu"))


def make_drafter(config, model, head) -> EagleDrafter:
    cache = PagedKVCache(1, 64, BLOCK, head.layer.attn.num_kv_heads, head.layer.attn.head_dim, torch.float32, "cpu")
    return EagleDrafter(head, model, cache, BLOCK, torch.device("cpu"))


def request_state(request_id: str, tokens: list[int], blocks: list[int]) -> ExecutorRequestState:
    return ExecutorRequestState(request_id=request_id, prompt_token_ids=tokens, output_token_ids=[],
                                block_ids=blocks, params=RowSamplingParams(), num_computed_tokens=len(tokens) - 1)


def unrolled_drafts(head, model, tokens: list[int], features: torch.Tensor) -> list[int]:
    """The head's drafts after ``tokens`` from the training forward (the chain of the last fed position),
    each step fed the previous draft as drafting does (training feeds the sequence's token there)."""
    m = len(tokens) - 1
    lm_rows = model.lm_head_weight[head.draft_vocab]
    drafts: list[int] = []
    for step in range(K):
        padded = tokens + drafts + [0] * (K - len(drafts))
        seq = DistillSequence(padded, 0, torch.cat([features[:m], torch.zeros(K, features.shape[1])]),
                              torch.full((m + K,), -1), True)
        with torch.no_grad():
            outputs = unrolled_forward(head, pack([seq]), model.embed_weight, lm_rows, model.rope_cos,
                                       model.rope_sin, step + 1)
        drafts.append(int(head.draft_vocab[outputs[step].logits[m - 1].argmax()]))
    return drafts


def test_paged_drafting_equals_the_unrolled_training_forward(target):
    config, model, _ = target
    head = random_head(config, 40)
    tokens = [5, 9, 17, 3, 22, 9, 17, 41, 8, 30, 12]
    features = target_features(model, tokens)
    drafter = make_drafter(config, model, head)
    state = request_state("a", tokens, list(range(8)))
    feed(drafter, "a", 0, features[: len(tokens)])
    drafts = drafter.propose([DraftRequest(state, K)])[0]
    assert drafts == unrolled_drafts(head, model, tokens, features)
    assert len(set(drafts)) > 1 or drafts[0] in head.draft_vocab.tolist()


def _target_and_head(directory) -> tuple:
    """A family's tiny checkpoint loaded as the target, and a random head for it."""
    config = load_hf_config(directory)
    return config, load_model(directory, torch.float32, "cpu", TorchAttentionBackend()), random_head(config, 40)


def _assert_paged_drafts_equal_training_drafts(config, model, head) -> None:
    tokens = [5, 9, 17, 3, 22, 9, 17, 41, 8, 30, 12]
    features = target_features(model, tokens)
    drafter = make_drafter(config, model, head)
    feed(drafter, "a", 0, features[: len(tokens)])
    drafts = drafter.propose([DraftRequest(request_state("a", tokens, list(range(8))), K)])[0]
    assert drafts == unrolled_drafts(head, model, tokens, features)


def test_paged_drafting_equals_the_unrolled_training_forward_for_a_granite_target(tmp_path):
    """Granite scales each residual branch: training and drafting must scale alike."""
    config, model, head = _target_and_head(make_tiny_granite(tmp_path, seed=3, vocab_size=64,
                                                             residual_multiplier=8.0))
    assert head.layer.residual_scale == 8.0
    with torch.no_grad():  # branches strong enough against the residual for their scale to change the drafts
        head.layer.attn.o_weight.mul_(30)
        head.layer.mlp.down_weight.mul_(30)
    _assert_paged_drafts_equal_training_drafts(config, model, head)


def test_paged_drafting_equals_the_unrolled_training_forward_for_a_gemma2_target(tmp_path):
    """Gemma 2 caps attention scores and norms each branch's output: training and drafting must do both alike."""
    config, model, head = _target_and_head(make_tiny_gemma2(tmp_path, seed=3, vocab_size=64,
                                                            attn_logit_softcapping=0.5, head_dim=16))
    assert head.layer.attn.logit_softcap == 0.5 and head.layer.attention_out_norm_weight is not None
    with torch.no_grad():  # attention peaked enough for the cap to change it
        head.layer.attn.qkv_weight.mul_(20)
    _assert_paged_drafts_equal_training_drafts(config, model, head)


def test_paged_drafting_equals_the_unrolled_training_forward_for_a_cohere_target(tmp_path):
    """Cohere's MLP reads the attention's normed input and its norms are LayerNorms: training and drafting alike."""
    config, model, head = _target_and_head(make_tiny_cohere(tmp_path, seed=3, vocab_size=64))
    assert head.layer.parallel_residual and head.layer.post_attention_norm_weight is None
    with torch.no_grad():  # an MLP strong enough against the residual for its input to change the drafts
        head.layer.mlp.down_weight.mul_(30)
    _assert_paged_drafts_equal_training_drafts(config, model, head)


def test_catch_up_over_chunks_and_after_rejected_drafts(target):
    """Features arrive in two prefill chunks, then a verify step whose last rows were rejected: the drafts
    are those of a drafter that saw the accepted features in one piece."""
    config, model, _ = target
    head = random_head(config, 64, seed=11)
    tokens = [5, 9, 17, 3, 22, 9, 17, 41, 8, 30, 12, 7, 7, 19]
    features = target_features(model, tokens)
    split = 6
    chunked = make_drafter(config, model, head)
    feed(chunked, "a", 0, features[:split])
    feed(chunked, "a", split, features[split:10])
    first = chunked.propose([DraftRequest(request_state("a", tokens[:11], list(range(8))), K)])[0]
    # The verify step fed positions 10..13 (the bonus token and 3 drafts); say 2 drafts were accepted.
    stale = torch.randn(4, features.shape[1])
    feed(chunked, "a", 10, stale)  # a first verify whose rows were all rejected...
    feed(chunked, "a", 10, features[10:14])  # ...then the step that fed those positions again
    second = chunked.propose([DraftRequest(request_state("a", tokens[:13], list(range(8))), K)])[0]
    whole = make_drafter(config, model, head)
    feed(whole, "a", 0, features[:12])
    assert whole.propose([DraftRequest(request_state("a", tokens[:13], list(range(8))), K)])[0] == second
    assert first == unrolled_drafts(head, model, tokens[:11], features)


def test_batched_requests_draft_as_they_would_alone(target):
    config, model, _ = target
    head = random_head(config, 64, seed=2)
    prompts = {"a": [5, 9, 17, 3, 22, 9], "b": [1, 2, 3, 4, 5, 6, 7, 8, 9, 10], "c": [33, 34]}
    blocks = {"a": list(range(0, 8)), "b": list(range(8, 16)), "c": list(range(16, 24))}
    together = make_drafter(config, model, head)
    alone = {}
    for rid, tokens in prompts.items():
        feed(together, rid, 0, target_features(model, tokens)[: len(tokens) - 1], blocks[rid])
        single = make_drafter(config, model, head)
        feed(single, rid, 0, target_features(model, tokens)[: len(tokens) - 1], blocks[rid])
        alone[rid] = single.propose([DraftRequest(request_state(rid, tokens, blocks[rid]), 2 if rid == "c" else K)])
    batch = [DraftRequest(request_state(rid, tokens, blocks[rid]), 2 if rid == "c" else K)
             for rid, tokens in prompts.items()]
    assert together.propose(batch) == [alone[rid][0] for rid in prompts]


def test_missing_features_give_no_drafts_instead_of_wrong_ones(target):
    config, model, _ = target
    drafter = make_drafter(config, model, random_head(config, 64))
    tokens = [5, 9, 17, 3, 22, 9]
    feed(drafter, "a", 2, target_features(model, tokens)[2:5], list(range(4)))  # positions 0 and 1 never seen
    assert drafter.propose([DraftRequest(request_state("a", tokens, list(range(4))), K)]) == [[]]


def test_save_and_load_round_trip_and_target_checks(target, tmp_path):
    config, model, _ = target
    head = random_head(config, 16)
    save_head(head, EagleHeadConfig.for_target(config, 16, seed=1, target_probe=target_probe(model)), tmp_path)
    loaded, saved_config = load_head(tmp_path, config, TorchAttentionBackend(), torch.float32, "cpu")
    assert saved_config.target_probe == target_probe(model)
    for (name, a), (_, b) in zip(head.state_dict().items(), loaded.state_dict().items()):
        assert torch.equal(a, b), name
    other = load_hf_config(make_tiny_llama(tmp_path / "other", seed=0, vocab_size=80))
    with pytest.raises(ValueError, match="target_vocab_size"):
        load_head(tmp_path, other, TorchAttentionBackend(), torch.float32, "cpu")
    raw = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**raw, "format": "something-else"}))
    with pytest.raises(ValueError, match="eagle_dir"):
        load_head(tmp_path, config, TorchAttentionBackend(), torch.float32, "cpu")


def test_draft_vocab_size_is_checked(target):
    config, _, _ = target
    with pytest.raises(ValueError, match="draft_vocab_size"):
        EagleHeadConfig.for_target(config, config.vocab_size + 1)


def graphed_drafter(config, model, head, max_num_seqs: int = 4) -> EagleDrafter:
    """The head's twin on the graph-safe padded backend, its draft steps captured with the CPU stand-in."""
    twin = EagleHead(config, head.draft_vocab.shape[0], PaddedTorchAttentionBackend())
    twin.load_state_dict(head.state_dict())
    cache = PagedKVCache(1, 64, BLOCK, head.layer.attn.num_kv_heads, head.layer.attn.head_dim, torch.float32, "cpu",
                         scratch_blocks=1)
    drafter = EagleDrafter(twin, model, cache, BLOCK, torch.device("cpu"))
    drafter.capture_step_graphs(max_num_seqs, 8, EagerStandIn)
    return drafter


def test_replayed_draft_steps_draft_what_eager_steps_do(target):
    config, model, _ = target
    head = random_head(config, 64, seed=2)
    prompts = {"a": [5, 9, 17, 3, 22, 9], "b": [1, 2, 3, 4, 5, 6, 7, 8, 9, 10], "c": [33, 34]}
    blocks = {"a": list(range(0, 8)), "b": list(range(8, 16)), "c": list(range(16, 24))}
    eager, graphed = make_drafter(config, model, head), graphed_drafter(config, model, head)
    for drafter in (eager, graphed):
        for rid, tokens in prompts.items():
            feed(drafter, rid, 0, target_features(model, tokens)[: len(tokens) - 1], blocks[rid])
    batch = [DraftRequest(request_state(rid, tokens, blocks[rid]), 1 if rid == "c" else K)
             for rid, tokens in prompts.items()]  # c stops after one draft: the replayed batch shrinks
    assert graphed.propose(batch) == eager.propose(batch)
    assert graphed.num_replays == K - 1 and eager.num_replays == 0


def test_the_captured_draft_step_reads_no_host_value_and_compiles_as_one_graph(target):
    from host_syncs import recorded_host_syncs

    config, model, _ = target
    drafter = graphed_drafter(config, model, random_head(config, 64))
    graphs, step_model = drafter.step_graphs, drafter.step_model
    assert graphs is not None
    host = HostBatch(BLOCK)
    for row in range(2):
        host.add_sequence([0], 5 + row, list(range(8 * row, 8 * row + 8)))
    shape = graphs.shape_for(host)
    graphs.inputs.write(host, shape)
    step_model.features[:2].normal_()
    with torch.inference_mode(), recorded_host_syncs() as syncs:
        expected = graphs._forward(shape)
    assert syncs == []
    compiled = torch.compile(lambda: graphs._forward(shape), fullgraph=True, dynamic=False)
    with torch.inference_mode():
        torch.testing.assert_close(compiled(), expected, atol=1e-5, rtol=1e-5)


def test_a_request_past_a_cached_prefix_drafts_as_one_that_computed_it(target):
    """Prefix caching: positions 0-3 (one block) were computed for another request sharing the block; the new
    request's target feeds positions 4.. only, yet it drafts what a request that fed every position drafts."""
    config, model, _ = target
    head = random_head(config, 64)
    tokens = [5, 9, 17, 3, 22, 9, 30]
    features = target_features(model, tokens)
    drafter = make_drafter(config, model, head)
    feed(drafter, "first", 0, features[:6], [0, 1])
    first = drafter.propose([DraftRequest(request_state("first", tokens, [0, 1]), K)])
    drafter.adopt_cached_prefix("second", 4)
    feed(drafter, "second", 4, features[4:6], [0, 2])
    second = drafter.propose([DraftRequest(request_state("second", tokens, [0, 2]), K)])
    assert second == first and first != [[]]


def test_the_cached_prefix_needs_no_draft_by_the_request_that_computed_it(target):
    """The request that computed the shared block never drafted (K was 0, or speculation was off for it), so
    the head never wrote entries there; the new request's drafts are still a fresh drafter's."""
    config, model, _ = target
    head = random_head(config, 64, seed=5)
    tokens = [5, 9, 17, 3, 22, 9, 30, 12, 8]
    features = target_features(model, tokens)
    shared = make_drafter(config, model, head)
    shared.kv_cache.layers[0].normal_(0, 30, generator=torch.Generator().manual_seed(0))  # blocks used before
    feed(shared, "owner", 0, features[:8], [3, 1, 6])  # observed, never asked for drafts
    shared.adopt_cached_prefix("reader", 4)
    feed(shared, "reader", 4, features[4:8], [3, 0, 2])
    fresh = make_drafter(config, model, head)
    feed(fresh, "alone", 0, features[:8], [5, 7, 4])
    expected = fresh.propose([DraftRequest(request_state("alone", tokens, [5, 7, 4]), K)])
    assert shared.propose([DraftRequest(request_state("reader", tokens, [3, 0, 2]), K)]) == expected != [[]]
