"""vLLM's ``documents`` over HTTP (chat and /tokenize with messages): they reach the ChatPrompt, the engine gets the
prompt a retrieval-augmented template renders with them, and a bad value is a 400 naming ``documents``."""

from __future__ import annotations

import json

import pytest
from http_helpers import serve
from tiny_tokenizers import build_rag

from scheduler_svc.http.conversion import chat_plan, renamed_error
from scheduler_svc.http.protocol import ChatCompletionRequest
from scheduler_svc.tokenizer import Tokenizer
from scheduler_svc.validation import InvalidRequestError

QUESTION = {"role": "user", "content": "What is the capital of France?"}
DOCUMENTS = [{"title": "Paris", "text": "Paris is the capital of France."}, {"title": "Lyon", "text": "Food."}]


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory) -> Tokenizer:
    return Tokenizer.from_dir(build_rag(tmp_path_factory.mktemp("rag")))


def test_documents_become_the_chat_prompts_json_and_an_empty_list_sets_none():
    def documents_json(**fields) -> str:
        (pb,) = chat_plan(ChatCompletionRequest.model_validate({"messages": [QUESTION], **fields}), "m").requests
        return pb.chat.documents_json

    assert json.loads(documents_json(documents=DOCUMENTS)) == DOCUMENTS
    assert documents_json() == documents_json(documents=[]) == documents_json(documents=None) == ""
    error = renamed_error(InvalidRequestError("chat.documents_json", "bad"), "chat")
    assert error.param == "documents"


def test_the_engine_gets_the_prompt_rendered_with_the_documents_and_tokenize_counts_it(tokenizer):
    expected = tokenizer.apply_chat_template([QUESTION], documents=DOCUMENTS)
    assert "[2] Lyon: Food." in tokenizer.decode(expected, skip_special_tokens=False)

    async def test(client, served):
        body = {"messages": [QUESTION], "documents": DOCUMENTS}
        response = await client.post("/v1/chat/completions", json={**body, "max_tokens": 1})
        assert response.status_code == 200, response.text
        assert list(served.executor.prompts.values()) == [expected]
        assert response.json()["usage"]["prompt_tokens"] == len(expected)
        counted = await client.post("/tokenize", json=body)
        assert counted.status_code == 200 and counted.json()["tokens"] == expected, counted.text

    serve(tokenizer, test)


@pytest.mark.parametrize("path, body", [
    ("/v1/chat/completions", {"messages": [QUESTION], "documents": "Paris is the capital."}),
    ("/v1/chat/completions", {"messages": [QUESTION], "documents": ["Paris"]}),
    ("/tokenize", {"prompt": "hi", "documents": DOCUMENTS}),
])
def test_a_bad_value_is_400_naming_documents(tokenizer, path, body):
    async def test(client, served):
        response = await client.post(path, json=body)
        assert response.status_code == 400, response.text
        assert response.json()["error"]["param"].startswith("documents"), response.text
        assert served.executor.prompts == {}

    serve(tokenizer, test)
