"""`stepahead generate` sends every request parameter it has a flag for, and nothing it was not given."""

from __future__ import annotations

import json
from collections.abc import Iterator
from concurrent import futures

import grpc
import pytest

from client import cli
from stepahead_proto import generation_pb2, generation_pb2_grpc


class RecordingGeneration(generation_pb2_grpc.GenerationServicer):
    """Answers every Generate with "ok" and keeps the request."""

    def __init__(self) -> None:
        self.requests: list[generation_pb2.GenerateRequest] = []

    def Generate(self, request, context):  # noqa: N802 - gRPC method name
        self.requests.append(request)
        yield generation_pb2.GenerateResponse(request_id="r-1", text="ok", token_ids=[5], prompt_tokens=3)
        yield generation_pb2.GenerateResponse(request_id="r-1", finish_reason=generation_pb2.FINISH_REASON_LENGTH,
                                              usage=generation_pb2.Usage(prompt_tokens=3, completion_tokens=1))


@pytest.fixture()
def served() -> Iterator[tuple[str, RecordingGeneration]]:
    servicer = RecordingGeneration()
    server = grpc.server(futures.ThreadPoolExecutor(2))
    generation_pb2_grpc.add_GenerationServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield f"127.0.0.1:{port}", servicer
    finally:
        server.stop(None)


EVERY_FLAG = ["--system", "Be brief.", "--temperature", "0.7", "--top-p", "0.9", "--top-k", "40", "--min-p", "0.05",
              "--repetition-penalty", "1.1", "--presence-penalty", "0.5", "--frequency-penalty", "0.25",
              "--seed", "11", "--logprobs", "2", "--logit-bias", "7=-100", "--logit-bias", "9=2.5",
              "--max-tokens", "16", "--min-tokens", "2", "--stop", "\n\n", "--stop", "END", "--stop-token-id", "3",
              "--ignore-eos", "--include-stop-str", "--keep-special-tokens", "--no-speculation"]


def test_every_flag_reaches_its_request_field(served, capsys):
    address, servicer = served
    cli.main(["generate", "Hi there", "--server", address, "--json", *EVERY_FLAG])
    assert json.loads(capsys.readouterr().out)["text"] == "ok"
    (request,) = servicer.requests
    assert [(m.role, m.content) for m in request.chat.messages] == [("system", "Be brief."), ("user", "Hi there")]
    sampling, stopping = request.sampling, request.stopping
    assert (sampling.temperature, sampling.top_p, sampling.top_k, sampling.min_p) == pytest.approx((0.7, 0.9, 40, 0.05))
    assert (sampling.repetition_penalty, sampling.presence_penalty, sampling.frequency_penalty) == pytest.approx(
        (1.1, 0.5, 0.25))
    assert (sampling.seed, sampling.logprobs, dict(sampling.logit_bias)) == (11, 2, {7: -100.0, 9: 2.5})
    assert (stopping.max_tokens, stopping.min_tokens, list(stopping.stop), list(stopping.stop_token_ids)) == (
        16, 2, ["\n\n", "END"], [3])
    assert stopping.ignore_eos and stopping.include_stop_str_in_output
    assert request.HasField("skip_special_tokens") and not request.skip_special_tokens
    assert request.disable_speculation


def test_unset_flags_leave_the_server_defaults(served, capsys):
    address, servicer = served
    cli.main(["generate", "plain text", "--server", address, "--raw"])
    assert capsys.readouterr().out == "ok\n"
    (request,) = servicer.requests
    assert request.text == "plain text"
    assert request.sampling == generation_pb2.GenerateRequest().sampling
    assert request.stopping == generation_pb2.GenerateRequest().stopping
    assert not request.HasField("skip_special_tokens") and not request.disable_speculation


@pytest.mark.parametrize("flags, error", [
    (["--raw", "--system", "x"], "error: system: a system message needs the chat template (drop --raw)"),
    (["--logit-bias", "7"], "error: argument --logit-bias: must be ID=BIAS"),
    (["--logit-bias", "a=1"], "error: argument --logit-bias: must be ID=BIAS"),
])
def test_a_flag_that_cannot_be_sent_is_refused_naming_it(flags, error, capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["generate", "hi", "--server", "127.0.0.1:1", *flags])
    assert exit_info.value.code == 2
    assert error in capsys.readouterr().err
