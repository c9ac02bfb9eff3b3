"""The SDK's ``prediction`` option (OpenAI's predicted outputs): both clients send it as GenerateRequest.prediction,
and the result's usage carries the server's accepted and rejected prediction tokens."""

from __future__ import annotations

import asyncio

from fake_servers import serving

from client import AsyncClient, Client, Usage
from stepahead_proto import generation_pb2, generation_pb2_grpc

PREDICTION = "def f():\n    return 1\n"


class PredictingGeneration(generation_pb2_grpc.GenerationServicer):
    """Answers "ok"; a request with a prediction is told 4 of its tokens were accepted and 1 rejected."""

    def __init__(self) -> None:
        self.requests: list[generation_pb2.GenerateRequest] = []

    def Generate(self, request, context):  # noqa: N802 - gRPC method name
        self.requests.append(request)
        usage = generation_pb2.Usage(prompt_tokens=3, completion_tokens=5)
        if request.HasField("prediction"):
            usage.accepted_prediction_tokens, usage.rejected_prediction_tokens = 4, 1
        yield generation_pb2.GenerateResponse(request_id="r", text="ok", token_ids=[5], prompt_tokens=3)
        yield generation_pb2.GenerateResponse(request_id="r", finish_reason=generation_pb2.FINISH_REASON_STOP,
                                              usage=usage)


def test_both_clients_send_the_prediction_and_return_how_it_fared():
    servicer = PredictingGeneration()
    with serving(servicer) as address:
        with Client(address) as client:
            whole = client.generate("edit this", prediction=PREDICTION)
            streamed = list(client.generate_stream(messages=[{"role": "user", "content": "x"}], prediction=PREDICTION))
            plain = client.generate("edit this")

        async def scenario():
            async with AsyncClient(address) as async_client:
                result = await async_client.generate("edit this", prediction=PREDICTION)
                chunks = [chunk async for chunk in async_client.generate_stream("edit this", prediction=PREDICTION)]
                return result, chunks

        async_whole, async_chunks = asyncio.run(scenario())
    assert [request.prediction for request in servicer.requests] == [PREDICTION, PREDICTION, "", PREDICTION,
                                                                     PREDICTION]
    assert not servicer.requests[2].HasField("prediction")
    expected = Usage(prompt_tokens=3, completion_tokens=5, num_preemptions=0, accepted_prediction_tokens=4,
                     rejected_prediction_tokens=1)
    for usage in (whole.usage, streamed[-1].usage, async_whole.usage, async_chunks[-1].usage):
        assert usage == expected
    assert whole.to_dict()["usage"]["accepted_prediction_tokens"] == 4
    assert plain.usage is not None and (plain.usage.accepted_prediction_tokens,
                                        plain.usage.rejected_prediction_tokens) == (0, 0)
