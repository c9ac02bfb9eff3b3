"""A request's own chat template and its documents through real processes (--trust-request-chat-template), over gRPC
(the SDK) and HTTP (the openai package): the prompt the engine reads is the one the template renders, Generate and
Tokenize agree, and a server that does not trust request templates refuses them by name."""

from __future__ import annotations

import openai
import pytest

from client import Client, InvalidArgumentError

pytestmark = pytest.mark.stack

RAG_TEMPLATE = ("{% if documents %}Sources:{% for d in documents %} [{{ loop.index }}] {{ d.title }}: {{ d.text }}"
                "{% endfor %}\n{% endif %}{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}"
                "{% if add_generation_prompt %}assistant:{% endif %}")
MESSAGES = [{"role": "user", "content": "Capital of France?"}]
DOCUMENTS = [{"title": "Paris", "text": "Paris is the capital of France."}]


@pytest.fixture(scope="module")
def stack(tiny_model_dir, launch_module_stack):
    return launch_module_stack(tiny_model_dir, [], ["--http-port", "0", "--trust-request-chat-template"])


def test_the_request_template_and_its_documents_make_the_prompt_over_grpc(stack):
    with Client(stack.address) as client:
        own = client.tokenize(messages=MESSAGES, chat_template=RAG_TEMPLATE, documents=DOCUMENTS)
        text = client.detokenize(own.token_ids, skip_special_tokens=False)
        # trim_blocks (as HF renders) drops the newline right after {% endfor %}
        assert text == "Sources: [1] Paris: Paris is the capital of France.user: Capital of France?\nassistant:"
        result = client.generate(messages=MESSAGES, chat_template=RAG_TEMPLATE, documents=DOCUMENTS, max_tokens=3)
        assert result.usage.prompt_tokens == own.count
        models = client.tokenize(messages=MESSAGES, documents=DOCUMENTS)  # ChatML, which ignores documents
        assert models.token_ids != own.token_ids and models.count == client.tokenize(messages=MESSAGES).count


def test_the_request_template_and_its_documents_make_the_prompt_over_http(stack):
    with Client(stack.address) as client:
        expected = client.tokenize(messages=MESSAGES, chat_template=RAG_TEMPLATE, documents=DOCUMENTS).count
        model = client.model_info().model
    http = openai.OpenAI(base_url=f"{stack.http_url}/v1", api_key="unused")
    reply = http.chat.completions.create(model=model, messages=MESSAGES, max_tokens=3,
                                         extra_body={"chat_template": RAG_TEMPLATE, "documents": DOCUMENTS})
    assert reply.usage.prompt_tokens == expected
    with pytest.raises(openai.BadRequestError) as caught:
        http.chat.completions.create(model=model, messages=MESSAGES, max_tokens=3,
                                     extra_body={"chat_template": "{% for m in messages %}"})
    assert caught.value.body["param"] == "chat_template"


def test_an_untrusting_server_refuses_request_templates_by_name(tiny_model_dir, launch_module_stack):
    untrusting = launch_module_stack.with_scheduler(tiny_model_dir)
    with Client(untrusting.address) as client:
        with pytest.raises(InvalidArgumentError, match="chat.chat_template.*--trust-request-chat-template"):
            client.generate(messages=MESSAGES, chat_template=RAG_TEMPLATE, max_tokens=3)
        assert client.generate(messages=MESSAGES, documents=DOCUMENTS, max_tokens=3).usage.prompt_tokens > 0


def test_the_servers_chat_template_renders_every_chat_and_a_request_template_still_wins(tiny_model_dir, tmp_path,
                                                                                         launch_module_stack):
    """--chat-template (a file) replaces the model's template for every chat prompt, gRPC and HTTP alike; a trusted
    request's own template is still the one that request renders with."""
    path = tmp_path / "server.jinja"
    path.write_text("{% for m in messages %}<{{ m.role }}> {{ m.content }}\n{% endfor %}<assistant>")
    server = launch_module_stack.with_scheduler(tiny_model_dir, [], [
        "--chat-template", str(path), "--http-port", "0", "--trust-request-chat-template"])
    with Client(server.address) as client:
        rendered = client.tokenize(messages=MESSAGES)
        assert client.detokenize(rendered.token_ids, skip_special_tokens=False) == (
            "<user> Capital of France?\n<assistant>")
        assert client.generate(messages=MESSAGES, max_tokens=3).usage.prompt_tokens == rendered.count
        own = client.tokenize(messages=MESSAGES, chat_template=RAG_TEMPLATE)
        assert client.detokenize(own.token_ids, skip_special_tokens=False) == "user: Capital of France?\nassistant:"
        model = client.model_info().model
    http = openai.OpenAI(base_url=f"{server.http_url}/v1", api_key="unused")
    assert http.chat.completions.create(model=model, messages=MESSAGES, max_tokens=3).usage.prompt_tokens == (
        rendered.count)
