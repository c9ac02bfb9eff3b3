"""`stepahead chat`: each line is a user message sent with the conversation so far, the reply streams out and joins
the history; /reset clears it (the system message stays), /exit or the end of input ends the chat, and a refused
turn prints the error and is left out of the history."""

from __future__ import annotations

import io
from collections.abc import Iterator

import grpc
import pytest
from fake_servers import serving, unused_address

from client import cli
from stepahead_proto import generation_pb2, generation_pb2_grpc


class EchoingGeneration(generation_pb2_grpc.GenerationServicer):
    """Replies "you said: <the last message>" in two pieces; refuses a last message "too long"."""

    def __init__(self) -> None:
        self.conversations: list[list[tuple[str, str]]] = []
        self.samplings: list[generation_pb2.GenerateRequest] = []

    def Generate(self, request, context):  # noqa: N802 - gRPC method name
        self.conversations.append([(m.role, m.content) for m in request.chat.messages])
        self.samplings.append(request)
        said = request.chat.messages[-1].content
        if said == "too long":
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "prompt: 9000 tokens exceed the model's limit")
        yield generation_pb2.GenerateResponse(request_id="r", text="you said: ", token_ids=[5], prompt_tokens=3)
        yield generation_pb2.GenerateResponse(request_id="r", text=said, token_ids=[6],
                                              finish_reason=generation_pb2.FINISH_REASON_STOP)


@pytest.fixture()
def served() -> Iterator[tuple[str, EchoingGeneration]]:
    servicer = EchoingGeneration()
    with serving(servicer) as address:
        yield address, servicer


def chat(address: str, typed: str, monkeypatch, *flags: str) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO(typed))
    cli.main(["chat", "--server", address, *flags])


def test_each_turn_carries_the_conversation_and_reset_and_exit_work(served, monkeypatch, capsys):
    address, servicer = served
    chat(address, "hello\n\nagain\n/reset\nthird\n/exit\nnot sent\n", monkeypatch, "--system", "Be brief.",
         "--temperature", "0", "--max-tokens", "7")
    system = ("system", "Be brief.")
    assert servicer.conversations == [
        [system, ("user", "hello")],
        [system, ("user", "hello"), ("assistant", "you said: hello"), ("user", "again")],
        [system, ("user", "third")],
    ]
    assert capsys.readouterr().out == "you said: hello\nyou said: again\n(history cleared)\nyou said: third\n"
    assert all(r.sampling.temperature == 0 and r.stopping.max_tokens == 7 for r in servicer.samplings)


def test_a_refused_turn_prints_the_error_and_stays_out_of_the_history(served, monkeypatch, capsys):
    address, servicer = served
    chat(address, "hi\ntoo long\nstill there?", monkeypatch)  # the input ends without a newline or /exit
    assert servicer.conversations[-1] == [("user", "hi"), ("assistant", "you said: hi"), ("user", "still there?")]
    captured = capsys.readouterr()
    assert "error: INVALID_ARGUMENT: prompt: 9000 tokens exceed the model's limit" in captured.err
    assert captured.out == "you said: hi\nyou said: still there?\n"


def test_an_unreachable_server_is_an_error_after_the_wait(monkeypatch, capsys):
    with pytest.raises(SystemExit) as exit_info:
        chat(unused_address(), "hi\n", monkeypatch, "--wait-for-server", "0.3")
    assert exit_info.value.code == 2 and "within 0.3 s" in capsys.readouterr().err


class ThinkingGeneration(EchoingGeneration):
    """Thinks ("hm, ") before echoing, as a server with --reasoning-parser splits it (reasoning_text)."""

    def Generate(self, request, context):  # noqa: N802 - gRPC method name
        self.conversations.append([(m.role, m.content) for m in request.chat.messages])
        yield generation_pb2.GenerateResponse(request_id="r", reasoning_text="hm, ", token_ids=[4], prompt_tokens=3)
        yield generation_pb2.GenerateResponse(request_id="r", text="ok", token_ids=[5], thought=True,
                                              finish_reason=generation_pb2.FINISH_REASON_STOP)


def test_thinking_goes_to_stderr_and_the_history_keeps_the_answer(monkeypatch, capsys):
    servicer = ThinkingGeneration()
    with serving(servicer) as address:
        chat(address, "one\ntwo\n", monkeypatch)
    assert servicer.conversations[1] == [("user", "one"), ("assistant", "ok"), ("user", "two")]
    printed = capsys.readouterr()
    assert (printed.out, printed.err) == ("ok\nok\n", "hm, hm, ")
