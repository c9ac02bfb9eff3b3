"""Output processing: stop tokens, EOS, min/max tokens, stop strings, truncation of multi-token steps."""

from __future__ import annotations

import pytest
from tiny_tokenizers import build_byte_level

from scheduler_svc.output_processor import RequestOutputState
from scheduler_svc.request import Request, StopParams
from scheduler_svc.request_timing import RequestTiming
from scheduler_svc.tokenizer import Tokenizer
from stepahead_proto import generation_pb2, sampling_pb2

STOP = generation_pb2.FINISH_REASON_STOP
LENGTH = generation_pb2.FINISH_REASON_LENGTH


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory) -> Tokenizer:
    return Tokenizer.from_dir(build_byte_level(tmp_path_factory.mktemp("tok")))


def make_state(tokenizer: Tokenizer, max_model_len: int = 1000, **stop) -> RequestOutputState:
    params = StopParams(**{"max_tokens": 50, "eos_token_ids": frozenset({2}), **stop})
    request = Request("r", [5, 6, 7], sampling_pb2.SamplingParams(), params)
    return RequestOutputState(request, tokenizer, max_model_len, RequestTiming(arrival=0.0))


def feed(state: RequestOutputState, token_ids: list[int]) -> generation_pb2.GenerateResponse | None:
    return state.append_tokens(token_ids, [], now=1.0)


def test_eos_stops_and_is_kept_in_token_ids_not_text(tokenizer):
    ids = tokenizer.encode("Hello world")
    state = make_state(tokenizer)
    message = feed(state, ids + [2, 9, 9])  # a multi-token step: everything after EOS is dropped
    assert message.finish_reason == STOP and list(message.token_ids) == ids + [2]
    assert message.text == "Hello world"
    assert state.request.output_token_ids == ids + [2]


def test_ignore_eos_and_min_tokens(tokenizer):
    state = make_state(tokenizer, ignore_eos=True)
    assert feed(state, [2]).finish_reason == 0
    state = make_state(tokenizer, min_tokens=2)
    assert feed(state, [2]).finish_reason == 0
    assert feed(state, [2]).finish_reason == STOP


def test_max_tokens_is_exact_within_a_multi_token_step(tokenizer):
    state = make_state(tokenizer, max_tokens=3)
    message = feed(state, [40, 41, 42, 43, 44])
    assert message.finish_reason == LENGTH and list(message.token_ids) == [40, 41, 42]


def test_model_length_limit(tokenizer):
    state = make_state(tokenizer, max_model_len=5)  # 3 prompt tokens + 2
    assert feed(state, [40, 41, 42]).finish_reason == LENGTH
    assert state.request.num_output_tokens == 2


def test_stop_token_id_reports_reason(tokenizer):
    state = make_state(tokenizer, stop_token_ids=frozenset({41}))
    message = feed(state, [40, 41, 42])
    assert message.finish_reason == STOP and message.stop_reason == "41" and list(message.token_ids) == [40, 41]


def test_stop_string_split_across_tokens_is_never_streamed(tokenizer):
    text = "The quick brown fox jumps"
    ids = tokenizer.encode(text)
    state = make_state(tokenizer, stop=("brown fox",))
    streamed = []
    finish = None
    for token_id in ids:
        message = feed(state, [token_id])
        if message is not None:
            streamed.append(message.text)
            finish = message.finish_reason or finish
            if message.finish_reason:
                break
    assert finish == STOP
    assert "".join(streamed) == "The quick "


def test_stop_string_kept_when_asked(tokenizer):
    ids = tokenizer.encode("The quick brown fox jumps")
    state = make_state(tokenizer, stop=("brown",), include_stop_str_in_output=True)
    message = feed(state, ids)
    assert message.text == "The quick brown" and message.stop_reason == "brown"


def test_held_back_text_is_flushed_on_length_finish(tokenizer):
    ids = tokenizer.encode("Hello world")
    state = make_state(tokenizer, stop=("world peace",), max_tokens=len(ids))
    message = feed(state, ids)
    assert message.finish_reason == LENGTH and message.text == "Hello world"


def test_first_message_carries_prompt_tokens_and_final_fields(tokenizer):
    state = make_state(tokenizer, max_tokens=2)
    first = feed(state, [40])
    assert first.prompt_tokens == 3
    last = feed(state, [41])
    state.final_fields(last, now=2.0)
    assert last.usage.completion_tokens == 2 and last.usage.prompt_tokens == 3
    assert last.timings.e2e_s == 2.0 and last.timings.ttft_s == 1.0
