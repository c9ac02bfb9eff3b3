"""Checks of sampling.thinking_token_budget: the executor counts the thinking's tokens and forces the tokens that end
it (executor_svc.thinking_phases), so a budget needs the output split by a parser whose markers are single tokens,
and restrictions that leave those tokens allowed."""

from __future__ import annotations

from scheduler_svc.reasoning.thinking_bounds import ThinkingBounds
from scheduler_svc.request_errors import InvalidRequestError
from stepahead_proto import sampling_pb2

FIELD = "sampling.thinking_token_budget"


def check_thinking_budget(p: sampling_pb2.SamplingParams, reasoning_parser: str | None,
                          bounds: ThinkingBounds | None, bad_words: tuple[tuple[int, ...], ...]) -> None:
    """InvalidRequestError naming the field unless the request's budget (if any) is >= 0 and can be applied:
    ``reasoning_parser`` splits the output (None: not split), ``bounds`` are its markers' token ids (None: not single
    tokens), and neither allowed_token_ids nor ``bad_words`` (token sequences) forbid the tokens that end the
    thinking."""
    if not p.HasField("thinking_token_budget"):
        return
    if p.thinking_token_budget < 0:
        raise InvalidRequestError(FIELD, f"must be >= 0, got {p.thinking_token_budget}")
    if reasoning_parser is None:
        raise InvalidRequestError(FIELD, "needs the output's thinking split off: a server started with "
                                         "--reasoning-parser and a chat prompt (or split_reasoning: true)")
    if bounds is None:
        raise InvalidRequestError(FIELD, f"the model's tokenizer does not write the {reasoning_parser} parser's "
                                         "thinking markers as single tokens, so its thinking cannot be counted and "
                                         "ended")
    if bounds.header_end_token_id is not None:
        raise InvalidRequestError(FIELD, f"not served with the {reasoning_parser} parser: reasoning_effort sets how "
                                         "long the model thinks")
    ends = set(bounds.end_token_ids)
    if p.allowed_token_ids and not ends <= set(p.allowed_token_ids):
        raise InvalidRequestError(FIELD, f"allowed_token_ids must allow the tokens that end the thinking "
                                         f"({sorted(ends)}): the budget forces them")
    if any(words[-1] in ends for words in bad_words):
        raise InvalidRequestError(FIELD, "a bad word forbids a token that ends the thinking, which the budget "
                                         "forces")
