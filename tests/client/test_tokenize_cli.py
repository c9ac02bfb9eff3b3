"""`stepahead tokenize` sends the prompt as `generate` would and prints the count, the ids, or JSON."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from fake_servers import serving

from client import cli
from stepahead_proto import generation_pb2, generation_pb2_grpc


class RecordingTokenizer(generation_pb2_grpc.GenerationServicer):
    """Tokenizes to one id per message (or 7, 8, 9 for raw text) and detokenizes an id as "<id>"."""

    def __init__(self) -> None:
        self.requests: list[generation_pb2.TokenizeRequest] = []

    def Tokenize(self, request, context):  # noqa: N802 - gRPC method name
        self.requests.append(request)
        ids = [7, 8, 9] if request.HasField("text") else list(range(len(request.chat.messages)))
        return generation_pb2.TokenizeResponse(token_ids=ids, max_model_len=100)

    def Detokenize(self, request, context):  # noqa: N802 - gRPC method name
        assert request.HasField("skip_special_tokens") and not request.skip_special_tokens
        return generation_pb2.DetokenizeResponse(text="".join(f"<{i}>" for i in request.token_ids))


@pytest.fixture()
def served() -> Iterator[tuple[str, RecordingTokenizer]]:
    servicer = RecordingTokenizer()
    with serving(servicer) as address:
        yield address, servicer


def test_the_chat_prompt_is_counted_and_its_ids_printed(served, capsys):
    address, servicer = served
    cli.main(["tokenize", "Hi there", "--server", address, "--system", "Be brief."])
    assert capsys.readouterr().out.splitlines() == ["2 tokens (max_model_len 100)", "0 1"]
    (request,) = servicer.requests
    assert [(m.role, m.content) for m in request.chat.messages] == [("system", "Be brief."), ("user", "Hi there")]


def test_raw_text_and_json_with_each_tokens_text(served, capsys):
    address, servicer = served
    cli.main(["tokenize", "plain", "--server", address, "--raw", "--json"])
    assert json.loads(capsys.readouterr().out) == {"count": 3, "max_model_len": 100, "token_ids": [7, 8, 9],
                                                   "texts": ["<7>", "<8>", "<9>"]}
    assert servicer.requests[0].text == "plain"


def test_system_with_raw_is_refused_naming_the_option(served, capsys):
    address, servicer = served
    with pytest.raises(SystemExit) as exited:
        cli.main(["tokenize", "hi", "--server", address, "--raw", "--system", "x"])
    assert exited.value.code == 2 and "system:" in capsys.readouterr().err and servicer.requests == []


def test_the_chat_template_flags_reach_the_tokenize_request(served, capsys, tmp_path):
    address, servicer = served
    (tmp_path / "kwargs.json").write_text('{"enable_thinking": false}')
    cli.main(["tokenize", "Capital of France?", "--server", address, "--continue", "The capital is",
              "--chat-template-kwargs", f"@{tmp_path / 'kwargs.json'}"])
    cli.main(["tokenize", "Hi", "--server", address, "--no-generation-prompt"])
    continued, headless = (request.chat for request in servicer.requests)
    assert [m.role for m in continued.messages] == ["user", "assistant"] and continued.continue_final_message
    assert continued.template_kwargs_json == '{"enable_thinking": false}'
    assert headless.HasField("add_generation_prompt") and not headless.add_generation_prompt
