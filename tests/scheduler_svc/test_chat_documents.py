"""ChatPrompt.documents_json: documents for retrieval-augmented generation reach the chat template as ``documents``,
rendered as HF transformers' apply_chat_template(documents=...) renders them; bad values are refused by name and
count toward the prompt's size."""

from __future__ import annotations

import json

import pytest
from tiny_tokenizers import build_rag

from scheduler_svc.tokenization import tokenize
from scheduler_svc.tokenizer import Tokenizer
from scheduler_svc.validation import MAX_PROMPT_CHARS_PER_TOKEN, InvalidRequestError, ModelLimits, build_request
from stepahead_proto import generation_pb2

MAX_MODEL_LEN = 512
DOCUMENTS = [{"title": "Paris", "text": "Paris is the capital of France."},
             {"title": "Lyon", "text": "Lyon is known for its food."}]
QUESTION = generation_pb2.ChatMessage(role="user", content="What is the capital of France?")


@pytest.fixture(scope="module")
def rag_dir(tmp_path_factory):
    return build_rag(tmp_path_factory.mktemp("rag"))


@pytest.fixture(scope="module")
def tokenizer(rag_dir) -> Tokenizer:
    return Tokenizer.from_dir(rag_dir)


def limits_of(tokenizer: Tokenizer, max_model_len: int = MAX_MODEL_LEN) -> ModelLimits:
    return ModelLimits("tiny", max_model_len, tokenizer.vocab_size, frozenset({2}), 16)


def chat(documents_json: str) -> generation_pb2.ChatPrompt:
    return generation_pb2.ChatPrompt(messages=[QUESTION], documents_json=documents_json)


def test_documents_render_as_transformers_renders_them(rag_dir, tokenizer):
    transformers = pytest.importorskip("transformers")
    hf = transformers.AutoTokenizer.from_pretrained(str(rag_dir))
    messages = [{"role": "user", "content": QUESTION.content}]
    for documents in (DOCUMENTS, None):
        expected = hf.apply_chat_template(messages, documents=documents, tokenize=False, add_generation_prompt=True)
        prompt = chat(json.dumps(documents) if documents else "")
        ids = tokenize(generation_pb2.TokenizeRequest(chat=prompt), tokenizer, limits_of(tokenizer)).token_ids
        assert tokenizer.decode(list(ids), skip_special_tokens=False) == expected
        assert ("Lyon is known for its food." in expected) == (documents is not None)


def test_generate_reads_the_documents_as_tokenize_does(tokenizer):
    with_documents = build_request(generation_pb2.GenerateRequest(chat=chat(json.dumps(DOCUMENTS))), tokenizer,
                                   limits_of(tokenizer))
    without = build_request(generation_pb2.GenerateRequest(chat=chat("[]")), tokenizer, limits_of(tokenizer))
    text = tokenizer.decode(with_documents.prompt_token_ids, skip_special_tokens=False)
    assert "[2] Lyon: Lyon is known for its food." in text
    assert "Documents" not in tokenizer.decode(without.prompt_token_ids, skip_special_tokens=False)


@pytest.mark.parametrize(("documents_json", "reason"), [
    ("{", "JSON"),
    ('{"title": "x"}', "must be a JSON array"),
    ('["text"]', "item 0 must be a JSON object"),
])
def test_bad_documents_are_refused_naming_the_field(tokenizer, documents_json, reason):
    with pytest.raises(InvalidRequestError) as caught:
        build_request(generation_pb2.GenerateRequest(chat=chat(documents_json)), tokenizer, limits_of(tokenizer))
    assert caught.value.field == "chat.documents_json" and reason in caught.value.reason


def test_documents_count_toward_the_prompt_character_limit(tokenizer):
    limits = limits_of(tokenizer, max_model_len=32)
    huge = json.dumps([{"title": "t", "text": "x" * (MAX_PROMPT_CHARS_PER_TOKEN * 32)}])
    with pytest.raises(InvalidRequestError) as caught:
        build_request(generation_pb2.GenerateRequest(chat=chat(huge)), tokenizer, limits)
    assert caught.value.field == "chat" and "characters" in caught.value.reason
