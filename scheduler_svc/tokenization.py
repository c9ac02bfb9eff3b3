"""Tokenize and Detokenize: a prompt's tokens exactly as Generate would read them, and token ids back to text.

Both go through the checks Generate uses (validation.py), so a prompt Tokenize accepts tokenizes to the ids a
Generate call with the same prompt starts from, and every refusal names its field.
"""

from __future__ import annotations

from scheduler_svc.request_errors import InvalidRequestError
from scheduler_svc.tokenizer import Tokenizer
from scheduler_svc.validation import ModelLimits, check_model_name, prompt_token_ids
from stepahead_proto import generation_pb2


def tokenize(pb: generation_pb2.TokenizeRequest, tokenizer: Tokenizer,
             limits: ModelLimits) -> generation_pb2.TokenizeResponse:
    """The prompt's token ids and the model's length limit. Raises InvalidRequestError.

    A prompt of max_model_len tokens or more is answered (counting it is the point), not refused as Generate
    refuses it; one too long to be worth tokenizing is refused by the same character limit as Generate's.
    """
    check_model_name(pb.model, limits)
    ids = prompt_token_ids(pb, tokenizer, limits)
    return generation_pb2.TokenizeResponse(token_ids=ids, max_model_len=limits.max_model_len)


def detokenize(pb: generation_pb2.DetokenizeRequest, tokenizer: Tokenizer,
               limits: ModelLimits) -> generation_pb2.DetokenizeResponse:
    """The text of ``pb.token_ids`` (special tokens dropped unless skip_special_tokens is false).

    Raises InvalidRequestError for an id outside the vocabulary or more ids than max_model_len.
    """
    check_model_name(pb.model, limits)
    ids = list(pb.token_ids)
    if len(ids) > limits.max_model_len:
        raise InvalidRequestError(
            "token_ids", f"{len(ids)} ids; at most {limits.max_model_len} (the model's length limit)")
    for index, token_id in enumerate(ids):
        if not 0 <= token_id < limits.vocab_size:
            raise InvalidRequestError(
                f"token_ids[{index}]", f"{token_id} is outside the vocabulary [0, {limits.vocab_size})")
    skip_special = pb.skip_special_tokens if pb.HasField("skip_special_tokens") else True
    return generation_pb2.DetokenizeResponse(text=tokenizer.decode(ids, skip_special_tokens=skip_special))
