"""The eagle_ngram drafter: a request whose context has an n-gram match gets the lookup's drafts, the others the
EAGLE-style head's; the head catches up over lookup-drafted tokens and then drafts what a head that saw every
feature at once drafts."""

from __future__ import annotations

import pytest
import torch
from test_eagle_drafter import K, feed, make_drafter, random_head, request_state, target_features
from tiny_models import make_tiny_llama

from executor_svc.attention.torch_backend import TorchAttentionBackend
from executor_svc.drafters.base import DraftRequest
from executor_svc.drafters.eagle_ngram import EagleNgramDrafter
from executor_svc.drafters.ngram import NgramDrafter
from executor_svc.model_loader import load_hf_config, load_model

REPEATING = [5, 9, 17, 3, 22, 9, 17]  # ends in (9, 17), which followed 5 earlier: the lookup drafts 3, 22, 9
UNIQUE = [1, 2, 3, 4, 5, 6, 7, 8, 10]  # no suffix of 2+ tokens occurs earlier


@pytest.fixture(scope="module")
def target(tmp_path_factory):
    directory = make_tiny_llama(tmp_path_factory.mktemp("target"), seed=3, vocab_size=64)
    return load_hf_config(directory), load_model(directory, torch.float32, "cpu", TorchAttentionBackend())


def hybrid_and_eagle(config, model, seed: int = 11):
    head = random_head(config, 64, seed=seed)
    return EagleNgramDrafter(make_drafter(config, model, head), NgramDrafter(2, 4)), make_drafter(config, model, head)


def observe_all(drafter, request_id: str, model, tokens: list[int], blocks: list[int] | None = None) -> None:
    """The target's features of every position but the newest (as the steps that computed them hand them on)."""
    feed(drafter, request_id, 0, target_features(model, tokens)[: len(tokens) - 1], blocks)


def test_a_match_gets_the_lookup_and_no_match_the_head_in_one_batch(target):
    config, model = target
    hybrid, eagle = hybrid_and_eagle(config, model)
    for drafter in (hybrid, eagle):
        observe_all(drafter, "repeating", model, REPEATING)
        observe_all(drafter, "unique", model, UNIQUE, list(range(8, 16)))
    batch = [DraftRequest(request_state("repeating", REPEATING, list(range(8))), K),
             DraftRequest(request_state("unique", UNIQUE, list(range(8, 16))), K),
             DraftRequest(request_state("none wanted", UNIQUE, list(range(16, 24))), 0)]
    proposals = hybrid.propose(batch)
    assert proposals[0] == [3, 22, 9]
    assert proposals[1] == eagle.propose([batch[1]])[0] and len(proposals[1]) == K
    assert proposals[2] == []


def test_the_head_catches_up_over_lookup_drafted_tokens(target):
    """Steps drafted by the lookup leave the head behind; once the context has no match, it feeds every
    entry it missed and drafts what a head that saw them all in one piece drafts."""
    config, model = target
    hybrid, _ = hybrid_and_eagle(config, model, seed=5)
    tokens = [5, 9, 17, 3, 22, 9, 17, 3, 22, 9, 40]
    features = target_features(model, tokens)
    feed(hybrid, "a", 0, features[:6])
    assert hybrid.propose([DraftRequest(request_state("a", tokens[:7], list(range(8))), K)])[0] == [3, 22, 9]
    feed(hybrid, "a", 6, features[6:10])  # the verify step fed positions 6..9; all 3 drafts were accepted
    # ... and its bonus token, 40, leaves a context without a match of 2 or more tokens.
    drafts = hybrid.propose([DraftRequest(request_state("a", tokens[:11], list(range(8))), K)])[0]
    _, fresh = hybrid_and_eagle(config, model, seed=5)
    feed(fresh, "a", 0, features[:10])
    assert drafts == fresh.propose([DraftRequest(request_state("a", tokens[:11], list(range(8))), K)])[0]
    assert len(drafts) == K and hybrid.eagle._computed["a"] == 10


def test_drop_and_reset_reach_the_head(target):
    config, model = target
    hybrid, _ = hybrid_and_eagle(config, model)
    observe_all(hybrid, "a", model, UNIQUE)
    hybrid.drop("a")
    assert hybrid.propose([DraftRequest(request_state("a", UNIQUE, list(range(8))), K)]) == [[]]
    observe_all(hybrid, "b", model, UNIQUE)
    hybrid.reset()
    assert hybrid.propose([DraftRequest(request_state("b", UNIQUE, list(range(8))), K)]) == [[]]
