"""GenerateRequest.prediction (OpenAI's predicted outputs): its tokens, which the executor drafts from."""

from __future__ import annotations

from scheduler_svc.request_errors import InvalidRequestError
from scheduler_svc.tokenizer import Tokenizer
from stepahead_proto import generation_pb2

FIELD = "prediction"


def prediction_token_ids(pb: generation_pb2.GenerateRequest, tokenizer: Tokenizer, max_model_len: int,
                         max_chars: int) -> list[int]:
    """The prediction tokenized as output text is (no special tokens added); empty without one. InvalidRequestError
    naming the field when the request opted out of speculation, or the prediction is longer than ``max_chars``
    characters or the model's context."""
    if not pb.HasField("prediction"):
        return []
    if pb.disable_speculation:
        raise InvalidRequestError(FIELD, "its tokens are drafts of speculative decoding, which disable_speculation "
                                         "turns off for this request; drop one of the two")
    if len(pb.prediction) > max_chars:
        raise InvalidRequestError(FIELD, f"{len(pb.prediction)} characters; at most {max_chars}")
    ids = tokenizer.encode(pb.prediction, add_special_tokens=False)
    if len(ids) > max_model_len:
        raise InvalidRequestError(FIELD, f"{len(ids)} tokens; at most the model's context of {max_model_len}")
    return ids
