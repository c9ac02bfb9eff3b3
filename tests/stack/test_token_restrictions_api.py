"""allowed_token_ids, bad_words and truncate_prompt_tokens through real processes, with the target drafting for itself
(its drafts ignore the restrictions, so verification must apply them) and the scheduler running ahead: outputs equal
those of the same request without speculation, follow the restriction, and every bad value is refused by name."""

from __future__ import annotations

import pytest

from client import Client, InvalidArgumentError

pytestmark = pytest.mark.stack

PROMPT = [5, 17, 33, 64, 90, 120, 48, 3, 11, 200]
MAX_MODEL_LEN = 256


@pytest.fixture(scope="module")
def stack(tiny_model_dir, launch_module_stack):
    return launch_module_stack.with_scheduler(tiny_model_dir, [
        "--spec-method", "draft_model", "--draft-model", str(tiny_model_dir), "--num-spec-tokens", "3",
        "--max-model-len", str(MAX_MODEL_LEN)])


def speculated_and_not(client: Client, **options) -> tuple:
    speculated = client.generate(token_ids=PROMPT, temperature=0.0, max_tokens=24, **options)
    alone = client.generate(token_ids=PROMPT, temperature=0.0, max_tokens=24, disable_speculation=True, **options)
    assert speculated.spec is not None and speculated.spec.drafted > 0
    assert speculated.token_ids == alone.token_ids
    return speculated.token_ids


def contains(tokens: tuple[int, ...], sequence: list[int]) -> bool:
    return any(list(tokens[i:i + len(sequence)]) == sequence for i in range(len(tokens) - len(sequence) + 1))


def test_bad_words_are_never_generated_with_or_without_speculation(stack):
    with Client(stack.address) as client:
        free = client.generate(token_ids=PROMPT, temperature=0.0, max_tokens=24, disable_speculation=True)
        words = [client.detokenize(free.token_ids[1:3]), client.detokenize(free.token_ids[6:7])]
        sequences = [client.tokenize(text).token_ids for word in words for text in (word.lstrip(),
                                                                                   " " + word.lstrip())]
        assert any(contains(free.token_ids, list(s)) for s in sequences)
        restricted = speculated_and_not(client, bad_words=words)
    assert restricted != free.token_ids
    assert not any(contains(restricted, list(s)) for s in sequences)


def test_allowed_token_ids_bound_the_output_with_or_without_speculation(stack):
    allowed = list(range(100, 160))
    with Client(stack.address) as client:
        restricted = speculated_and_not(client, allowed_token_ids=allowed)
    assert set(restricted) <= set(allowed) and len(restricted) == 24  # EOS is not allowed: max_tokens ends it


def test_a_prompt_longer_than_the_context_is_served_truncated(stack):
    long_prompt = [3 + (7 * i) % 390 for i in range(2 * MAX_MODEL_LEN)]
    with Client(stack.address) as client:
        with pytest.raises(InvalidArgumentError, match="prompt"):
            client.generate(token_ids=long_prompt, max_tokens=4)
        truncated = client.generate(token_ids=long_prompt, temperature=0.0, max_tokens=8, truncate_prompt_tokens=100)
        given = client.generate(token_ids=long_prompt[-100:], temperature=0.0, max_tokens=8)
        assert truncated.token_ids == given.token_ids and truncated.usage.prompt_tokens == 100
        longest = client.generate(token_ids=long_prompt, temperature=0.0, truncate_prompt_tokens=-1)
        assert longest.usage.prompt_tokens == MAX_MODEL_LEN - 1 and len(longest.token_ids) == 1


@pytest.mark.parametrize(("options", "field"), [
    ({"allowed_token_ids": [400]}, "sampling.allowed_token_ids[0]"),
    ({"bad_words": [" "]}, "sampling.bad_words[0]"),
    ({"bad_words": ["x"], "regex": "a+"}, "sampling.bad_words"),
    ({"truncate_prompt_tokens": 0}, "truncate_prompt_tokens"),
])
def test_bad_values_are_refused_naming_the_field_and_leak_nothing(stack, options, field):
    with Client(stack.address) as client:
        with pytest.raises(InvalidArgumentError, match=field.replace("[", r"\[").replace("]", r"\]")):
            client.generate(token_ids=PROMPT, max_tokens=4, **options)
        info = client.model_info()
    assert info.num_free_kv_blocks == info.num_kv_blocks and info.num_running == 0
