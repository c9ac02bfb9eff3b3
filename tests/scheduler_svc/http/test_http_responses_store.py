"""Stored Responses API responses: a response is kept unless ``store: false``; ``previous_response_id`` continues its
conversation (the engine reads the same prompt as the whole conversation sent in ``input``, without the earlier
instructions); ``GET`` and ``DELETE /v1/responses/{id}`` (checked with the ``openai`` package's types); the least
recently used is evicted past ``--responses-store-size``, and 0 stores nothing; what is not stored is a 404 naming
the parameter."""

from __future__ import annotations

import asyncio

import pytest
from http_helpers import FakeExecutor, scripted, serve, typed_events
from openai.types.responses import Response, ResponseItem
from pydantic import TypeAdapter
from tiny_tokenizers import build_byte_level, build_thinking

from scheduler_svc.http.response_store import ResponseStore, StoredResponse
from scheduler_svc.tokenizer import Tokenizer

ROUTE = "/v1/responses"
TOOLS = [{"type": "function", "name": "get_weather", "parameters": {"type": "object"}}]
CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory) -> Tokenizer:
    return Tokenizer.from_dir(build_byte_level(tmp_path_factory.mktemp("tok")))


async def create(client, **body) -> dict:
    response = await client.post(ROUTE, json={"max_output_tokens": 60, **body})
    assert response.status_code == 200, response.text
    Response.model_validate(response.json())
    return response.json()


def last_prompt(served) -> list[int]:
    return list(served.executor.prompts.values())[-1]


def test_store_keeps_what_lru_order_allows():
    store = ResponseStore(2)
    for name in ("a", "b"):
        store.put(StoredResponse({"id": name}, ()))
    assert store.get("a") is not None  # "a" is now the most recently used
    store.put(StoredResponse({"id": "c"}, ()))
    assert (store.get("b"), len(store)) == (None, 2) and store.get("a") and store.get("c")
    assert store.delete("a") and not store.delete("a")
    off = ResponseStore(0)
    off.put(StoredResponse({"id": "x"}, ()))
    assert not off.enabled and off.get("x") is None
    with pytest.raises(ValueError, match="capacity"):
        ResponseStore(-1)


def test_a_continued_conversation_reads_as_the_whole_conversation_sent_at_once(tokenizer):
    async def test(client, served):
        first = await create(client, input="Hi", instructions="Be brief.")
        assert first["store"] is True and first["previous_response_id"] is None
        second = await create(client, input="And then?", previous_response_id=first["id"])
        assert second["previous_response_id"] == first["id"]
        continued = last_prompt(served)
        await create(client, store=False, input=[{"role": "user", "content": "Hi"},
                                                 {"role": "assistant", "content": "Hello there"},
                                                 {"role": "user", "content": "And then?"}])
        assert continued == last_prompt(served)  # the earlier instructions are not carried over
        third = await create(client, input="More?", previous_response_id=second["id"], instructions="Be kind.")
        whole = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello there"},
                 {"role": "user", "content": "And then?"}, {"role": "assistant", "content": "Hello there"},
                 {"role": "user", "content": "More?"}]
        continued = last_prompt(served)
        counted = await client.post(f"{ROUTE}/input_tokens", json={"input": "More?", "instructions": "Be kind.",
                                                                   "previous_response_id": second["id"]})
        await create(client, store=False, input=whole, instructions="Be kind.")
        assert continued == last_prompt(served)
        assert counted.json()["input_tokens"] == third["usage"]["input_tokens"] == len(continued)

    serve(tokenizer, test, executor=scripted(tokenizer, "Hello there"))


def test_a_tool_call_is_continued_with_its_output(tokenizer):
    async def test(client, served):
        first = await create(client, input="Weather in Paris?", tools=TOOLS, max_output_tokens=110)
        call = first["output"][-1]
        assert call["type"] == "function_call"
        result = [{"type": "function_call_output", "call_id": call["call_id"], "output": "Sunny"}]
        await create(client, input=result, tools=TOOLS, previous_response_id=first["id"], max_output_tokens=110)
        continued = last_prompt(served)
        await create(client, store=False, tools=TOOLS, max_output_tokens=110,
                     input=[{"role": "user", "content": "Weather in Paris?"}, *first["output"], *result])
        assert continued == last_prompt(served)

    serve(tokenizer, test, executor=scripted(tokenizer, "Let me check.\n\n" + CALL), tool_call_parser="hermes")


def test_a_reasoning_output_is_continued_with_its_thinking(tmp_path):
    thinking = Tokenizer.from_dir(build_thinking(tmp_path))

    async def test(client, served):
        first = await create(client, input="Is 91 prime?")
        assert [item["type"] for item in first["output"]] == ["reasoning", "message"]
        await create(client, input="Sure?", previous_response_id=first["id"])
        continued = last_prompt(served)
        await create(client, store=False, input=[{"role": "user", "content": "Is 91 prime?"}, *first["output"],
                                                 {"role": "user", "content": "Sure?"}])
        assert continued == last_prompt(served)
        assert "7 x 13" in thinking.decode(continued)  # the template renders earlier reasoning_content

    serve(thinking, test, executor=scripted(thinking, "<think>7 x 13.</think>No."), reasoning_parser="qwen3")


def test_get_and_delete_a_stored_response(tokenizer):
    async def test(client, served):
        whole = await create(client, input="Hi")
        streamed = await client.post(ROUTE, json={"input": "Hi", "stream": True, "max_output_tokens": 60})
        completed = typed_events(streamed.text)[-1]["response"]
        for body in (whole, completed):
            got = await client.get(f"{ROUTE}/{body['id']}")
            assert got.status_code == 200 and got.json() == body
            Response.model_validate(got.json())
        deleted = await client.delete(f"{ROUTE}/{whole['id']}")
        assert deleted.json() == {"id": whole["id"], "object": "response", "deleted": True}
        for method in (client.get, client.delete):
            gone = await method(f"{ROUTE}/{whole['id']}")
            assert gone.status_code == 404 and gone.json()["error"]["param"] == "response_id"
        continued = await client.post(ROUTE, json={"input": "x", "previous_response_id": whole["id"]})
        assert continued.status_code == 404 and continued.json()["error"]["param"] == "previous_response_id"
        unstored = await create(client, input="Hi", store=False)
        assert unstored["store"] is False
        assert (await client.get(f"{ROUTE}/{unstored['id']}")).status_code == 404

    serve(tokenizer, test, executor=scripted(tokenizer, "Hello there"))


def test_the_least_recently_used_is_evicted_and_the_error_says_so(tokenizer):
    async def test(client, served):
        ids = [(await create(client, input=f"Hi {n}"))["id"] for n in range(3)]
        gone = await client.post(ROUTE, json={"input": "x", "previous_response_id": ids[0]})
        assert gone.status_code == 404 and "keeps the last 2" in gone.json()["error"]["message"]
        assert (await client.get(f"{ROUTE}/{ids[2]}")).status_code == 200

    serve(tokenizer, test, executor=scripted(tokenizer, "Hello"), response_store=ResponseStore(2))


def test_a_server_that_stores_nothing_says_so(tokenizer):
    async def test(client, served):
        assert (await create(client, input="Hi"))["store"] is False  # unset store: not stored here
        for body, param in (({"store": True}, "store"), ({"previous_response_id": "resp_1"}, "previous_response_id")):
            refused = await client.post(ROUTE, json={"input": "Hi", **body})
            assert refused.status_code == 400 and refused.json()["error"]["param"] == param
            assert "--responses-store-size 0" in refused.json()["error"]["message"]
        missing = await client.get(f"{ROUTE}/resp_1")
        assert missing.status_code == 404 and "keeps no responses" in missing.json()["error"]["message"]

    serve(tokenizer, test, executor=scripted(tokenizer, "Hello"), response_store=ResponseStore(0))


def test_reading_and_deleting_need_the_api_key(tokenizer):
    async def test(client, served):
        created = await client.post(ROUTE, json={"input": "Hi"}, headers={"Authorization": "Bearer k1"})
        response_id = created.json()["id"]
        for method in (client.get, client.delete):
            assert (await method(f"{ROUTE}/{response_id}")).status_code == 401
        assert (await client.get(f"{ROUTE}/{response_id}", headers={"x-api-key": "k1"})).status_code == 200

    serve(tokenizer, test, executor=FakeExecutor(eos_after=2), api_keys=("k1",))


ITEMS = TypeAdapter(list[ResponseItem])
"""The openai package's own item types: an item it does not know, or malformed, fails validation."""


def test_input_items_list_the_responses_own_input_in_pages(tokenizer):
    async def test(client, served):
        first = await create(client, input="Hi")
        listed = (await client.get(f"{ROUTE}/{first['id']}/input_items")).json()
        (item,) = ITEMS.validate_python(listed["data"])
        assert (item.type, item.role, item.content[0].text) == ("message", "user", "Hi")
        assert listed["object"] == "list" and not listed["has_more"] and listed["first_id"] == item.id
        conversation = [{"role": "developer", "content": "Be brief."},
                        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "A"}]},
                        {"role": "assistant", "content": "B"},
                        {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": "{}"},
                        {"type": "function_call_output", "call_id": "call_1", "output": "Sunny"},
                        {"role": "user", "content": "C"}]
        second = await create(client, input=conversation, previous_response_id=first["id"])
        route = f"{ROUTE}/{second['id']}/input_items"
        everything = (await client.get(route, params={"order": "asc", "limit": 100})).json()["data"]
        items = ITEMS.validate_python(everything)  # its own input only, not the earlier turn's
        assert [item.type for item in items] == ["message", "message", "message", "function_call",
                                                 "function_call_output", "message"]
        assert len({item.id for item in items}) == 6
        newest = (await client.get(route, params={"limit": 2})).json()
        assert [item["id"] for item in newest["data"]] == [everything[5]["id"], everything[4]["id"]]
        assert newest["has_more"] and newest["last_id"] == everything[4]["id"]
        after = (await client.get(route, params={"limit": 2, "after": newest["last_id"]})).json()
        assert [item["id"] for item in after["data"]] == [everything[3]["id"], everything[2]["id"]]
        before = (await client.get(route, params={"order": "asc", "before": everything[3]["id"], "limit": 2})).json()
        assert [item["id"] for item in before["data"]] == [everything[1]["id"], everything[2]["id"]]
        for params, param in (({"limit": 0}, "limit"), ({"order": "up"}, "order"), ({"after": "x"}, "after"),
                              ({"page": 2}, "page")):
            refused = await client.get(route, params=params)
            assert refused.status_code == 400 and refused.json()["error"]["param"] == param
        assert (await client.get(f"{ROUTE}/resp_x/input_items")).status_code == 404

    serve(tokenizer, test, executor=scripted(tokenizer, "Hello there"))


async def settled(client, response_id: str) -> dict:
    """The stored response once its background generation has ended."""
    for _ in range(500):
        stored = (await client.get(f"{ROUTE}/{response_id}")).json()
        if stored["status"] not in ("queued", "in_progress"):
            return stored
        await asyncio.sleep(0.01)
    raise AssertionError(f"{response_id} did not settle: {stored}")


def test_a_background_response_is_queued_at_once_and_fetched_when_done(tokenizer):
    async def test(client, served):
        foreground = await create(client, input="Hi")
        queued = await create(client, input="Hi", background=True)
        assert (queued["status"], queued["background"], queued["store"], queued["output"]) == (
            "queued", True, True, [])
        done = Response.model_validate(await settled(client, queued["id"]))
        assert done.status == "completed" and done.output_text == foreground["output"][0]["content"][0]["text"]
        assert done.usage.output_tokens == foreground["usage"]["output_tokens"]
        finished = await client.post(f"{ROUTE}/{queued['id']}/cancel")
        assert finished.status_code == 400 and finished.json()["error"]["param"] == "response_id"

    serve(tokenizer, test, executor=scripted(tokenizer, "Hello there"))


def test_cancelling_stops_the_generation_and_frees_its_blocks(tokenizer):
    async def test(client, served):
        queued = await create(client, input="Hi", background=True, max_output_tokens=200)
        await asyncio.sleep(0.1)
        cancelled = await client.post(f"{ROUTE}/{queued['id']}/cancel")
        assert cancelled.status_code == 200 and cancelled.json()["status"] == "cancelled"
        Response.model_validate(cancelled.json())
        assert (await client.get(f"{ROUTE}/{queued['id']}")).json()["status"] == "cancelled"
        again = await client.post(f"{ROUTE}/{queued['id']}/cancel")
        assert again.status_code == 200 and again.json()["status"] == "cancelled"
        running = await create(client, input="Hi", background=True, max_output_tokens=200)
        assert (await client.delete(f"{ROUTE}/{running['id']}")).json()["deleted"]
        await asyncio.sleep(0.05)
        assert (await client.get(f"{ROUTE}/{running['id']}")).status_code == 404  # stopped, not stored again
        assert (await client.post(f"{ROUTE}/resp_x/cancel")).status_code == 404
        # (serve then checks every request ended and every KV block is free)

    serve(tokenizer, test, executor=FakeExecutor(step_delay_s=0.02))


def test_a_background_response_that_fails_is_stored_failed(tokenizer):
    async def test(client, served):
        queued = await create(client, input="Hi", background=True)
        failed = await settled(client, queued["id"])
        assert failed["status"] == "failed" and failed["error"]["code"] == "server_error" and failed["error"]["message"]
        Response.model_validate(failed)

    serve(tokenizer, test, executor=FakeExecutor(fail=True))


@pytest.mark.parametrize(("body", "store", "param"), [
    ({"store": False}, 256, "background"), ({}, 0, "background"), ({"stream": True}, 256, "stream"),
])
def test_a_background_response_needs_the_store_and_no_stream(tokenizer, body, store, param):
    async def test(client, served):
        refused = await client.post(ROUTE, json={"input": "Hi", "background": True, **body})
        assert refused.status_code == 400 and refused.json()["error"]["param"] == param

    serve(tokenizer, test, response_store=ResponseStore(store))
