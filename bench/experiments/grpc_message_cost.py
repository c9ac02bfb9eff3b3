"""CPU per streamed message of Python gRPC (grpc.aio) on both ends, without the stack: a stub
Generation server streams 400 small GenerateResponses, one every 2 ms, on each of 16 concurrent
Generate calls; the client reads them with the SDK's AsyncClient or with the raw aio stub.

    PYTHONPATH=.:proto python bench/experiments/grpc_message_cost.py ROUNDS"""
import asyncio
import multiprocessing
import os
import sys

import grpc
from cpu_per_step import process_cpu_s

from stepahead_proto import generation_pb2, generation_pb2_grpc

MESSAGES = 400
STREAMS = 16


def serve(port_queue: multiprocessing.Queue) -> None:
    class StubGeneration(generation_pb2_grpc.GenerationServicer):
        async def Generate(self, request, context):
            for i in range(MESSAGES):
                await asyncio.sleep(0.002)
                yield generation_pb2.GenerateResponse(request_id="r", text="ab", token_ids=[i])

    async def main() -> None:
        server = grpc.aio.server()
        generation_pb2_grpc.add_GenerationServicer_to_server(StubGeneration(), server)
        port_queue.put(server.add_insecure_port("127.0.0.1:0"))
        await server.start()
        await server.wait_for_termination()

    asyncio.run(main())


async def read_with_sdk(address: str) -> int:
    from client.async_client import AsyncClient

    async with AsyncClient(address) as client:
        async def one() -> int:
            return sum([len(chunk.token_ids) async for chunk in client.generate_stream("hi", max_tokens=5)])
        return sum(await asyncio.gather(*(one() for _ in range(STREAMS))))


async def read_with_stub(address: str) -> int:
    async with grpc.aio.insecure_channel(address) as channel:
        stub = generation_pb2_grpc.GenerationStub(channel)

        async def one() -> int:
            return sum([len(m.token_ids) async for m in stub.Generate(generation_pb2.GenerateRequest(text="hi"))])
        return sum(await asyncio.gather(*(one() for _ in range(STREAMS))))


def main() -> None:
    port_queue: multiprocessing.Queue = multiprocessing.Queue()
    server = multiprocessing.Process(target=serve, args=(port_queue,), daemon=True)
    server.start()
    address = f"127.0.0.1:{port_queue.get()}"
    try:
        for round_index in range(int(sys.argv[1])):
            for name, reader in (("sdk", read_with_sdk), ("raw stub", read_with_stub)):
                server_before, client_before = process_cpu_s(server.pid), process_cpu_s(os.getpid())
                count = asyncio.run(reader(address))
                client_us = 1e6 * (process_cpu_s(os.getpid()) - client_before) / count
                server_us = 1e6 * (process_cpu_s(server.pid) - server_before) / count
                print(f"round {round_index} {name}: {count} messages, client {client_us:.1f} us/message, "
                      f"server {server_us:.1f} us/message", flush=True)
    finally:
        server.terminate()


if __name__ == "__main__":
    main()
