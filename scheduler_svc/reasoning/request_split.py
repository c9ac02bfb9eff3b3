"""Which requests' outputs the server's --reasoning-parser splits (GenerateRequest.split_reasoning)."""

from __future__ import annotations

from scheduler_svc.request_errors import InvalidRequestError
from stepahead_proto import generation_pb2


def splitting_parser(pb: generation_pb2.GenerateRequest, server_parser: str | None) -> str | None:
    """The parser that splits ``pb``'s output, None when it is not split. Unset ``split_reasoning``: a chat prompt's
    free-text output is split when the server has a parser. Raises InvalidRequestError for a split that cannot be."""
    constrained = pb.sampling.HasField("structured_output")
    if not pb.HasField("split_reasoning"):
        chat = pb.WhichOneof("prompt") == "chat"
        return server_parser if chat and not constrained else None
    if not pb.split_reasoning:
        return None
    if server_parser is None:
        raise InvalidRequestError("split_reasoning", "this server has no --reasoning-parser to split the thinking "
                                                     "off with")
    if constrained:
        raise InvalidRequestError("split_reasoning", "sampling.structured_output constrains the whole output, which "
                                                     "holds no thinking to split off")
    return server_parser
