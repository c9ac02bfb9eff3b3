"""--enable-force-include-usage (vLLM's flag): every chat and completion stream ends with its usage chunk, whether
the request asked (stream_options.include_usage) or not; without the flag only the streams that ask get one."""

from __future__ import annotations

import pytest
from http_helpers import FakeExecutor, events, serve
from tiny_tokenizers import build_byte_level

from scheduler_svc.tokenizer import Tokenizer

BODIES = {"/v1/chat/completions": {"messages": [{"role": "user", "content": "Hi"}]},
          "/v1/completions": {"prompt": "Hi"}}


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory) -> Tokenizer:
    return Tokenizer.from_dir(build_byte_level(tmp_path_factory.mktemp("tok")))


@pytest.mark.parametrize("forced", [True, False], ids=["forced", "asked"])
def test_streams_end_with_their_usage_when_forced(tokenizer, forced):
    async def test(client, served):
        for route, body in BODIES.items():
            chunks = events(await client.post(route, json={**body, "max_tokens": 5, "stream": True}))
            assert chunks[-1] == "[DONE]"
            last = chunks[-2]
            if forced:
                assert last["choices"] == [] and last["usage"]["completion_tokens"] == 3, last
            else:
                assert last.get("usage") is None and last["choices"], last
            asked = events(await client.post(route, json={**body, "max_tokens": 5, "stream": True,
                                                          "stream_options": {"include_usage": True}}))
            assert asked[-2]["usage"]["completion_tokens"] == 3

    serve(tokenizer, test, executor=FakeExecutor(eos_after=2), force_include_usage=forced)
