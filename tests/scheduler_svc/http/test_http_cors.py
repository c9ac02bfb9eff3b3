"""--allowed-origins (CORS): a browser page of an allowed origin may call the HTTP front (its preflight answered before
any API key check, every response, errors included, marked readable); other origins, and every origin without the
flag, get no CORS headers; bad origins are refused naming the setting, from the flag or its variable."""

from __future__ import annotations

import pytest
from cli_configs import SCHEDULER, scheduler_config_of
from http_helpers import FakeExecutor, serve
from tiny_tokenizers import build_byte_level

from client.cli import _build_parser
from scheduler_svc.cli_args import scheduler_flags
from scheduler_svc.config import SchedulerServiceConfig
from scheduler_svc.tokenizer import Tokenizer

UI = "https://ui.example:8080"
CHAT = "/v1/chat/completions"
BODY = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
PREFLIGHT = {"Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "authorization, content-type"}


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory) -> Tokenizer:
    return Tokenizer.from_dir(build_byte_level(tmp_path_factory.mktemp("tok")))


def test_an_allowed_origin_may_call_with_a_key_and_read_answers_and_errors(tokenizer):
    async def test(client, served):
        preflight = await client.options(CHAT, headers={"Origin": UI, **PREFLIGHT})
        assert preflight.status_code == 200 and preflight.headers["access-control-allow-origin"] == UI
        assert "POST" in preflight.headers["access-control-allow-methods"]
        assert "authorization" in preflight.headers["access-control-allow-headers"].lower()
        answered = await client.post(CHAT, json=BODY, headers={"Origin": UI, "Authorization": "Bearer k"})
        assert answered.status_code == 200 and answered.headers["access-control-allow-origin"] == UI
        refused = await client.post(CHAT, json=BODY, headers={"Origin": UI})  # no key: the page reads the 401
        assert refused.status_code == 401 and refused.headers["access-control-allow-origin"] == UI
        models = await client.get("/v1/models", headers={"Origin": UI, "Authorization": "Bearer k"})
        assert models.headers["access-control-allow-origin"] == UI

    serve(tokenizer, test, executor=FakeExecutor(eos_after=2), api_keys=("k",), allowed_origins=(UI,))


def test_other_origins_and_a_server_without_the_flag_send_no_cors_headers(tokenizer):
    async def check(client, origin):
        preflight = await client.options(CHAT, headers={"Origin": origin, **PREFLIGHT})
        assert "access-control-allow-origin" not in preflight.headers
        answered = await client.post(CHAT, json=BODY, headers={"Origin": origin})
        assert answered.status_code == 200 and "access-control-allow-origin" not in answered.headers

    async def allowing_ui(client, served):
        await check(client, "https://evil.example")

    async def allowing_none(client, served):
        await check(client, UI)

    serve(tokenizer, allowing_ui, executor=FakeExecutor(eos_after=2), allowed_origins=(UI,))
    serve(tokenizer, allowing_none, executor=FakeExecutor(eos_after=2))


def test_star_allows_any_origin(tokenizer):
    async def test(client, served):
        answered = await client.post(CHAT, json=BODY, headers={"Origin": "http://localhost:3000"})
        assert answered.headers["access-control-allow-origin"] == "*"

    serve(tokenizer, test, executor=FakeExecutor(eos_after=2), allowed_origins=("*",))


def test_the_flag_its_variable_and_serve_set_the_origins(monkeypatch):
    assert scheduler_config_of(SCHEDULER).allowed_origins == ()
    assert scheduler_config_of([*SCHEDULER, "--allowed-origins", UI, "*"]).allowed_origins == (UI, "*")
    monkeypatch.setenv("STEPAHEAD_ALLOWED_ORIGINS", f"{UI} http://localhost:3000")
    assert scheduler_config_of(SCHEDULER).allowed_origins == (UI, "http://localhost:3000")
    flags = scheduler_flags(_build_parser().parse_args(["serve", "--allowed-origins", UI]))
    assert flags[flags.index("--allowed-origins") + 1] == UI


@pytest.mark.parametrize("origin", ["ui.example", "https://ui.example/app", "ftp://ui.example", "https://", ""])
def test_a_bad_origin_is_refused_naming_the_setting(origin):
    with pytest.raises(ValueError, match=f"^allowed_origins: '{origin}' is not"):
        SchedulerServiceConfig(model_dir="m", executor_addresses=("127.0.0.1:1",), allowed_origins=(origin,))
