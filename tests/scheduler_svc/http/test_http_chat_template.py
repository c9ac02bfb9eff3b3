"""vLLM's chat template controls over HTTP: ``add_generation_prompt``, ``continue_final_message``,
``chat_template_kwargs`` and ``chat_template`` on /v1/chat/completions and /tokenize reach the ChatPrompt, the engine
gets the prompt they render (usage counts it), and every bad value is a 400 naming the parameter."""

from __future__ import annotations

import json

import pytest
from http_helpers import serve
from tiny_tokenizers import build_thinking

from scheduler_svc.http.conversion import chat_plan, renamed_error
from scheduler_svc.http.protocol import ChatCompletionRequest
from scheduler_svc.tokenizer import Tokenizer
from scheduler_svc.validation import MAX_TEMPLATE_KWARGS_CHARS, InvalidRequestError

CHAT = "/v1/chat/completions"
QUESTION = {"role": "user", "content": "Capital of France?"}
PREFILL = {"role": "assistant", "content": "The capital is"}


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory) -> Tokenizer:
    return Tokenizer.from_dir(build_thinking(tmp_path_factory.mktemp("thinking")))


def plan_chat(**fields):
    (pb,) = chat_plan(ChatCompletionRequest.model_validate({"messages": [QUESTION], **fields}), "m").requests
    return pb.chat


def test_the_controls_become_the_chat_prompts_fields():
    plain = plan_chat()
    assert not plain.HasField("add_generation_prompt") and not plain.continue_final_message
    assert plain.template_kwargs_json == ""
    chat = plan_chat(add_generation_prompt=False, continue_final_message=True,
                     chat_template_kwargs={"enable_thinking": False, "persona": "Zürich"})
    assert chat.HasField("add_generation_prompt") and not chat.add_generation_prompt and chat.continue_final_message
    assert json.loads(chat.template_kwargs_json) == {"enable_thinking": False, "persona": "Zürich"}
    assert plan_chat(add_generation_prompt=True).add_generation_prompt
    assert plan_chat(chat_template_kwargs={}).template_kwargs_json == ""  # neutral: no kwargs


def test_a_request_template_becomes_the_chat_prompts_and_null_or_empty_is_unset():
    template = "{% for m in messages %}[{{ m.role }}] {{ m.content }}\n{% endfor %}"
    assert plan_chat(chat_template=template).chat_template == template
    assert plan_chat(chat_template="").chat_template == "" and plan_chat(chat_template=None).chat_template == ""
    assert plan_chat().chat_template == ""


@pytest.mark.parametrize("field, param", [
    ("chat.add_generation_prompt", "add_generation_prompt"),
    ("chat.continue_final_message", "continue_final_message"),
    ("chat.chat_template", "chat_template"),
    ("chat.template_kwargs_json", "chat_template_kwargs"),
    ("chat.template_kwargs_json.bos_token", "chat_template_kwargs.bos_token"),
])
def test_the_grpc_fields_are_named_as_http_parameters(field, param):
    error = renamed_error(InvalidRequestError(field, "bad"), "chat")
    assert error.param == param and error.message == f"{param}: bad"


def usage_and_prompt(response, served) -> tuple[int, list[int]]:
    assert response.status_code == 200, response.text
    (prompt,) = served.executor.prompts.values()
    return response.json()["usage"]["prompt_tokens"], prompt


@pytest.mark.parametrize("fields, rendered", [
    ({}, {}),
    ({"add_generation_prompt": False}, {"add_generation_prompt": False}),
    ({"chat_template_kwargs": {"enable_thinking": False}}, {"template_kwargs": {"enable_thinking": False}}),
    ({"continue_final_message": True}, {"add_generation_prompt": False, "continue_final_message": True}),
    ({"continue_final_message": True, "add_generation_prompt": False, "chat_template_kwargs": {"persona": "Terse."}},
     {"add_generation_prompt": False, "continue_final_message": True, "template_kwargs": {"persona": "Terse."}}),
])
def test_the_engine_gets_the_rendered_prompt_and_tokenize_counts_it(tokenizer, fields, rendered):
    messages = [QUESTION, PREFILL] if fields.get("continue_final_message") else [QUESTION]
    expected = tokenizer.apply_chat_template(messages, **rendered)

    async def test(client, served):
        body = {"messages": messages, **fields}
        response = await client.post(CHAT, json={**body, "max_tokens": 1})
        assert usage_and_prompt(response, served) == (len(expected), expected)
        counted = await client.post("/tokenize", json=body)
        assert counted.status_code == 200, counted.text
        assert counted.json()["tokens"] == expected

    serve(tokenizer, test)


def test_a_continued_answer_ends_the_prompt_unterminated(tokenizer):
    async def test(client, served):
        body = {"messages": [QUESTION, PREFILL], "continue_final_message": True, "add_generation_prompt": False}
        response = await client.post("/tokenize", json=body)
        text = tokenizer.decode(response.json()["tokens"], skip_special_tokens=False)
        assert text.endswith("France?<|im_end|>\n<|im_start|>assistant\nThe capital is"), text

    serve(tokenizer, test)


BAD = [
    ({"messages": [QUESTION, PREFILL], "continue_final_message": True, "add_generation_prompt": True},
     "add_generation_prompt", "continue_final_message"),
    ({"messages": [PREFILL, QUESTION], "continue_final_message": True}, "continue_final_message",
     "not one of role 'user'"),
    ({"messages": [QUESTION], "chat_template_kwargs": {"messages": []}}, "chat_template_kwargs.messages", "itself"),
    ({"messages": [QUESTION], "chat_template_kwargs": {"enable_thinking": True, "eos_token": "x"}},
     "chat_template_kwargs.eos_token", "itself"),
    ({"messages": [QUESTION], "chat_template_kwargs": {"x": "y" * MAX_TEMPLATE_KWARGS_CHARS}}, "chat_template_kwargs",
     "at most"),
    ({"messages": [QUESTION], "chat_template_kwargs": [1]}, "chat_template_kwargs", ""),
    ({"messages": [QUESTION], "chat_template_kwargs": "enable_thinking"}, "chat_template_kwargs", ""),
    ({"messages": [QUESTION], "continue_final_message": "yes"}, "continue_final_message", ""),
    ({"messages": [QUESTION], "add_generation_prompt": 1}, "add_generation_prompt", ""),
    ({"messages": [QUESTION], "chat_template": ["{{ 1 }}"]}, "chat_template", ""),
    ({"messages": [QUESTION], "chat_template": "{{ messages[0].content }}"}, "chat_template",
     "--trust-request-chat-template"),  # this server renders with the model's template only
]


@pytest.mark.parametrize("path", [CHAT, "/tokenize"])
@pytest.mark.parametrize("body, param, words", BAD)
def test_a_bad_control_is_400_naming_its_parameter(tokenizer, path, body, param, words):
    async def test(client, served):
        response = await client.post(path, json=body)
        assert response.status_code == 400, response.text
        error = response.json()["error"]
        assert error["param"] == param and error["message"].startswith(f"{param}: ") and words in error["message"]
        assert served.executor.prompts == {}

    serve(tokenizer, test)


@pytest.mark.parametrize("fields, param", [
    ({"continue_final_message": True}, "continue_final_message"),
    ({"chat_template_kwargs": {"enable_thinking": False}}, "chat_template_kwargs"),
    ({"add_generation_prompt": False}, "add_generation_prompt"),
    ({"chat_template": "{{ messages }}"}, "chat_template"),
])
def test_tokenize_refuses_the_controls_with_a_text_prompt(tokenizer, fields, param):
    async def test(client, served):
        response = await client.post("/tokenize", json={"prompt": "hi", **fields})
        assert response.status_code == 400 and response.json()["error"]["param"] == param, response.text
        neutral = await client.post("/tokenize", json={"prompt": "hi", "continue_final_message": False,
                                                       "chat_template_kwargs": {}, "chat_template": ""})
        assert neutral.status_code == 200, neutral.text

    serve(tokenizer, test, request_chat_templates=True)


BRACKETS = ("{% for m in messages %}[{{ m.role }}] {{ m.content }}\n{% endfor %}"
            "{% if add_generation_prompt %}[a]{% endif %}")


def test_a_trusting_server_renders_with_the_requests_template(tokenizer):
    expected = tokenizer.apply_chat_template([QUESTION], template_source=BRACKETS)
    assert expected != tokenizer.apply_chat_template([QUESTION])

    async def test(client, served):
        body = {"messages": [QUESTION], "chat_template": BRACKETS}
        response = await client.post(CHAT, json={**body, "max_tokens": 1})
        assert usage_and_prompt(response, served) == (len(expected), expected)
        counted = await client.post("/tokenize", json=body)
        assert counted.status_code == 200 and counted.json()["tokens"] == expected, counted.text
        for path in (CHAT, "/tokenize"):
            broken = await client.post(path, json={"messages": [QUESTION], "chat_template": "{% for %}"})
            assert broken.status_code == 400 and broken.json()["error"]["param"] == "chat_template", broken.text

    serve(tokenizer, test, request_chat_templates=True)


EFFORT = "{{ reasoning_effort | default('none') }}:{% for m in messages %}{{ m.content }}{% endfor %}"


def test_reasoning_effort_reaches_the_template_as_its_variable(tokenizer):
    """OpenAI's reasoning_effort becomes the template variable of the name (gpt-oss's template reads it), as in vLLM;
    chat_template_kwargs may repeat it but not contradict it; a value OpenAI does not define is a 400."""
    assert json.loads(plan_chat(reasoning_effort="high").template_kwargs_json) == {"reasoning_effort": "high"}
    both = plan_chat(reasoning_effort="low", chat_template_kwargs={"reasoning_effort": "low", "persona": "x"})
    assert json.loads(both.template_kwargs_json) == {"reasoning_effort": "low", "persona": "x"}

    async def test(client, served):
        for effort, rendered in (("high", "high:"), (None, "none:")):
            body = {"messages": [QUESTION], "chat_template": EFFORT, "max_tokens": 1, "reasoning_effort": effort}
            expected = tokenizer.encode(rendered + QUESTION["content"], add_special_tokens=False)
            assert usage_and_prompt(await client.post(CHAT, json=body), served)[1] == expected
            served.executor.prompts.clear()
        for body, words in (({"reasoning_effort": "max"}, "reasoning_effort"),
                            ({"reasoning_effort": "low", "chat_template_kwargs": {"reasoning_effort": "high"}},
                             "differs from chat_template_kwargs")):
            refused = await client.post(CHAT, json={"messages": [QUESTION], **body})
            assert refused.status_code == 400 and refused.json()["error"]["param"] == "reasoning_effort", refused.text
            assert words in refused.json()["error"]["message"]

    serve(tokenizer, test, request_chat_templates=True)
