"""A thinking budget over HTTP: chat's ``thinking_token_budget`` (vLLM's) and the Messages API's ``thinking: {type:
"enabled", budget_tokens}`` reach the engine as sampling.thinking_token_budget with the thinking's markers (the
executor forces the end: tests/executor_svc/test_thinking_budget.py); what cannot be served is a 400 naming each
API's parameter."""

from __future__ import annotations

import pytest
from http_helpers import FakeExecutor, scripted, serve
from tiny_tokenizers import build_thinking

from scheduler_svc.reasoning.thinking_bounds import thinking_bounds
from scheduler_svc.tokenizer import Tokenizer

MESSAGES = [{"role": "user", "content": "Is 91 prime?"}]
ANSWER = "<think>7 x 13.</think>No."


@pytest.fixture(scope="module")
def marked(tmp_path_factory) -> Tokenizer:
    return Tokenizer.from_dir(build_thinking(tmp_path_factory.mktemp("marked"), markers=True))


def serve_reasoning(tokenizer: Tokenizer, test, parser: str | None = "qwen3") -> None:
    bounds = thinking_bounds(parser, tokenizer) if parser else None
    serve(tokenizer, test, executor=scripted(tokenizer, ANSWER), reasoning_parser=parser, thinking_bounds=bounds)


def sent_budgets(served) -> list[tuple[int | None, tuple[int, ...]]]:
    """Each engine request's budget and the thinking end tokens it carried to the executor."""
    executor = served.executor
    return [(sampling.thinking_token_budget if sampling.HasField("thinking_token_budget") else None,
             tuple(executor.formats_after_thinking[request_id].end_token_ids))
            for request_id, sampling in executor.samplings.items()]


def test_chat_sends_its_budget_with_the_markers_and_splits_the_answer(marked):
    async def test(client, served):
        response = await client.post("/v1/chat/completions",
                                      json={"messages": MESSAGES, "max_tokens": 50, "thinking_token_budget": 12})
        assert response.status_code == 200, response.text
        message = response.json()["choices"][0]["message"]
        assert (message["reasoning_content"], message["content"]) == ("7 x 13.", "No.")
        assert sent_budgets(served) == [(12, tuple(marked.encode("</think>", add_special_tokens=False)))]

    serve_reasoning(marked, test)


@pytest.mark.parametrize(("route", "body", "parser", "param", "why"), [
    ("/v1/chat/completions", {"thinking_token_budget": 4}, None, "thinking_token_budget", "split off"),
    ("/v1/chat/completions", {"thinking_token_budget": -1}, "qwen3", "thinking_token_budget", ">= 0"),
    ("/v1/chat/completions", {"thinking_token_budget": 4, "bad_words": ["</think>"]}, "qwen3",
     "thinking_token_budget", "bad word"),
    ("/v1/completions", {"thinking_token_budget": 4}, "qwen3", "thinking_token_budget", ""),
])
def test_a_budget_that_cannot_be_served_is_a_400_naming_it(marked, route, body, parser, param, why):
    async def test(client, served):
        prompt = {"messages": MESSAGES} if "chat" in route else {"prompt": "Is 91 prime?"}
        response = await client.post(route, json={**prompt, "max_tokens": 20, **body})
        assert response.status_code == 400, response.text
        error = response.json()["error"]
        assert error["param"] == param and why in error["message"], error

    serve_reasoning(marked, test, parser)


def test_messages_enabled_thinking_sends_its_budget_and_switches_thinking_on(marked):
    async def test(client, served):
        body = {"messages": MESSAGES, "max_tokens": 50}
        enabled = await client.post("/v1/messages", json={**body, "thinking": {"type": "enabled",
                                                                               "budget_tokens": 30}})
        assert enabled.status_code == 200, enabled.text
        assert [block["type"] for block in enabled.json()["content"]] == ["thinking", "text"]
        (budget, _), = sent_budgets(served)
        assert budget == 30
        counted = {}
        for kind in ("enabled", "disabled"):
            thinking = {"type": kind, "budget_tokens": 30} if kind == "enabled" else {"type": kind}
            response = await client.post("/v1/messages/count_tokens", json={"messages": MESSAGES,
                                                                             "thinking": thinking})
            counted[kind] = response.json()["input_tokens"]
        # the template is told enable_thinking: false opens and closes an empty thinking; true leaves it to the model
        assert counted["disabled"] > counted["enabled"] == enabled.json()["usage"]["input_tokens"]

    serve_reasoning(marked, test)


@pytest.mark.parametrize(("thinking", "parser", "why"), [
    ({"type": "enabled"}, "qwen3", "is required"),
    ({"type": "enabled", "budget_tokens": 50}, "qwen3", "must be less than max_tokens (50)"),
    ({"type": "adaptive", "budget_tokens": 10}, "qwen3", 'only allowed with type "enabled"'),
    ({"type": "enabled", "budget_tokens": 10}, None, "split off"),  # the engine's refusal, named as Anthropic's
])
def test_messages_budget_errors_name_thinking_budget_tokens(marked, thinking, parser, why):
    async def test(client, served):
        response = await client.post("/v1/messages", json={"messages": MESSAGES, "max_tokens": 50,
                                                           "thinking": thinking})
        assert response.status_code == 400, response.text
        message = response.json()["error"]["message"]
        assert message.startswith("thinking.budget_tokens") and why in message, message

    serve_reasoning(marked, test, parser)


def test_without_a_budget_nothing_is_sent(marked):
    async def test(client, served):
        response = await client.post("/v1/chat/completions", json={"messages": MESSAGES, "max_tokens": 20})
        assert response.status_code == 200
        assert sent_budgets(served) == [(None, ())]

    serve(marked, test, executor=FakeExecutor(eos_after=2), reasoning_parser="qwen3",
          thinking_bounds=thinking_bounds("qwen3", marked))
