"""Long prompts are tokenized off the event loop; short ones on it."""

from __future__ import annotations

import asyncio
import threading

import pytest

from scheduler_svc.prompt_work import INLINE_PROMPT_CHARS, prompt_chars, run_prompt_work
from stepahead_proto import generation_pb2


def test_prompt_chars_counts_the_text_to_tokenize():
    chat = generation_pb2.ChatPrompt(messages=[generation_pb2.ChatMessage(role="user", content="abc"),
                                               generation_pb2.ChatMessage(role="assistant", content="de")])
    assert prompt_chars(generation_pb2.GenerateRequest(text="hello")) == 5
    assert prompt_chars(generation_pb2.TokenizeRequest(chat=chat)) == 5 + len("user") + len("assistant") + 2 * 16
    assert prompt_chars(generation_pb2.GenerateRequest(token_ids=generation_pb2.TokenIdsPrompt(ids=[1] * 99))) == 0
    assert prompt_chars(generation_pb2.GenerateRequest()) == 0
    predicted = generation_pb2.GenerateRequest(token_ids=generation_pb2.TokenIdsPrompt(ids=[1]), prediction="abc" * 9)
    assert prompt_chars(predicted) == 27  # the prediction is tokenized too


def test_short_prompts_stay_on_the_loop_and_long_ones_leave_it_running():
    loop_thread = threading.get_ident()
    loop_ran = threading.Event()

    def long_work() -> int:
        # Inline, this would block the loop, and the coroutine that sets the event could never run.
        assert loop_ran.wait(10), "the event loop did not run while a long prompt was tokenized"
        return threading.get_ident()

    async def main() -> tuple[int, int]:
        short = await run_prompt_work(INLINE_PROMPT_CHARS, threading.get_ident)
        pending = asyncio.ensure_future(run_prompt_work(INLINE_PROMPT_CHARS + 1, long_work))
        await asyncio.sleep(0.01)
        loop_ran.set()
        return short, await pending

    short, long = asyncio.run(main())
    assert short == loop_thread and long != loop_thread


def test_errors_of_the_work_reach_the_caller_from_either_place():
    def refuse() -> None:
        raise ValueError("prompt: refused")

    for chars in (1, INLINE_PROMPT_CHARS + 1):
        with pytest.raises(ValueError, match="refused"):
            asyncio.run(run_prompt_work(chars, refuse))
