"""--generation-config through real processes: a generation_config.json that makes greedy the default gives an
unset-temperature request the greedy tokens, over gRPC and HTTP, while an explicit temperature still wins."""

from __future__ import annotations

import json

import httpx
import pytest

from client import Client

pytestmark = pytest.mark.stack

PROMPT = [5, 17, 33, 64, 90, 120, 48, 3, 11, 200]


@pytest.fixture(scope="module")
def stack(tiny_model_dir, launch_module_stack, tmp_path_factory):
    folder = tmp_path_factory.mktemp("generation_config")
    (folder / "generation_config.json").write_text(json.dumps({"temperature": 0.0, "max_new_tokens": 12}))
    return launch_module_stack.with_scheduler(tiny_model_dir, [],
                                              ["--http-port", "0", "--generation-config", str(folder)])


def test_unset_fields_take_the_configured_defaults(stack):
    with Client(stack.address) as client:
        greedy = client.generate(token_ids=PROMPT, temperature=0.0, max_tokens=12, ignore_eos=True)
        defaulted = client.generate(token_ids=PROMPT, ignore_eos=True)
        sampled = [client.generate(token_ids=PROMPT, temperature=1.5, seed=seed, ignore_eos=True).token_ids
                   for seed in range(3)]
        model = client.model_info().model
    assert defaulted.token_ids == greedy.token_ids and len(defaulted.token_ids) == 12
    assert any(tokens != greedy.token_ids for tokens in sampled)
    body = {"model": model, "prompt": PROMPT, "ignore_eos": True}
    reply = httpx.post(f"{stack.http_url}/v1/completions", json=body, timeout=30).json()
    assert reply["usage"]["completion_tokens"] == 12
    with Client(stack.address) as client:
        assert client.detokenize(greedy.token_ids) == reply["choices"][0]["text"]
