"""Which requests' outputs the server's --reasoning-parser splits (GenerateRequest.split_reasoning)."""

from __future__ import annotations

from scheduler_svc.reasoning.thinking_bounds import ThinkingBounds
from scheduler_svc.request_errors import InvalidRequestError
from stepahead_proto import generation_pb2


def splitting_parser(pb: generation_pb2.GenerateRequest, server_parser: str | None,
                     bounds: ThinkingBounds | None = None) -> str | None:
    """The parser that splits ``pb``'s output, None when it is not split. Unset ``split_reasoning``: a chat prompt's
    output is split when the server has a parser, and one with a structured output format when the format can wait
    for the thinking (``bounds``: the parser's markers in the model's tokenizer; the format then constrains the
    answer alone). Raises InvalidRequestError for a split that cannot be."""
    constrained = pb.sampling.HasField("structured_output")
    if not pb.HasField("split_reasoning"):
        chat = pb.WhichOneof("prompt") == "chat"
        return server_parser if chat and (bounds is not None or not constrained) else None
    if not pb.split_reasoning:
        return None
    if server_parser is None:
        raise InvalidRequestError("split_reasoning", "this server has no --reasoning-parser to split the thinking "
                                                     "off with")
    if constrained and bounds is None:
        raise InvalidRequestError("split_reasoning", f"the model's tokenizer does not write the {server_parser} "
                                                     "parser's thinking markers as single tokens, so "
                                                     "sampling.structured_output cannot wait for the thinking to end "
                                                     "(it constrains the whole output)")
    return server_parser
