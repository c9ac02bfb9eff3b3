"""Tests for scheduler_svc.detokenizer: streamed deltas always add up to the tokenizer's own decode."""

import random

import pytest
from tiny_tokenizers import build_byte_level, build_metaspace

from scheduler_svc.detokenizer import IncrementalDetokenizer
from scheduler_svc.tokenizer import Tokenizer

TEXTS = [
    "Hello world, the quick brown fox",
    " leading space and  double  spaces\n\nnew lines\ttabs",
    "café naïve señor",
    "中文字符世界日本語",
    "emoji 🎉😀🎉 flags 🇫🇷 zwj 👩‍💻 end",
    "mixed 世a界b🎉c",
]


@pytest.fixture(
    scope="module", params=["byte_level", "metaspace", pytest.param("default_model", marks=pytest.mark.slow)]
)
def tokenizer(request, tmp_path_factory) -> Tokenizer:
    """The two tiny tokenizers, and the real default model's."""
    if request.param == "default_model":
        env_dir = request.getfixturevalue("default_model_dir")
        return Tokenizer.from_dir(env_dir)
    builder = build_byte_level if request.param == "byte_level" else build_metaspace
    return Tokenizer.from_dir(builder(tmp_path_factory.mktemp(request.param)))


@pytest.fixture(scope="module")
def metaspace(tmp_path_factory) -> Tokenizer:
    return Tokenizer.from_dir(build_metaspace(tmp_path_factory.mktemp("metaspace_only")))


@pytest.fixture(scope="module")
def byte_level(tmp_path_factory) -> Tokenizer:
    return Tokenizer.from_dir(build_byte_level(tmp_path_factory.mktemp("byte_level_only")))


def stream(tokenizer: Tokenizer, ids: list[int], chunk_sizes: list[int], skip: bool = True) -> list[str]:
    """Push ``ids`` in chunks of the given sizes (cycled); return every delta, the flush last."""
    detokenizer = IncrementalDetokenizer(tokenizer, prompt_token_ids=[1, 2, 3], skip_special_tokens=skip)
    deltas, start, index = [], 0, 0
    while start < len(ids):
        size = chunk_sizes[index % len(chunk_sizes)]
        deltas.append(detokenizer.push(ids[start : start + size]))
        start, index = start + size, index + 1
    deltas.append(detokenizer.flush())
    assert detokenizer.text == "".join(deltas)
    return deltas


def assert_streams_like_decode(tokenizer: Tokenizer, ids: list[int], chunk_sizes: list[int], skip: bool) -> None:
    deltas = stream(tokenizer, ids, chunk_sizes, skip)
    expected = tokenizer.decode(ids, skip_special_tokens=skip)
    assert "".join(deltas) == expected, (ids, deltas)
    if "\ufffd" not in expected:
        assert not any("\ufffd" in delta for delta in deltas), (ids, deltas)


@pytest.mark.parametrize("skip", [True, False])
@pytest.mark.parametrize("chunk_sizes", [[1], [2], [3, 1, 4], [1000]])
def test_real_text_streams_exactly(tokenizer, chunk_sizes, skip):
    for text in TEXTS:
        ids = tokenizer.encode(text, add_special_tokens=False)
        assert_streams_like_decode(tokenizer, ids, chunk_sizes, skip)


@pytest.mark.parametrize("skip", [True, False])
def test_chat_output_with_special_tokens_streams_exactly(tokenizer, skip):
    ids = tokenizer.encode("Sure 🎉 世界!", add_special_tokens=False) + tokenizer.eos_token_ids[:1]
    assert_streams_like_decode(tokenizer, ids, [1], skip)


@pytest.mark.parametrize("seed", range(40))
def test_random_token_sequences_stream_exactly(tokenizer, seed):
    rng = random.Random(seed)
    ids = [rng.randrange(tokenizer.vocab_size) for _ in range(rng.randint(0, 40))]
    chunk_sizes = [rng.randint(1, 4) for _ in range(5)]
    assert_streams_like_decode(tokenizer, ids, chunk_sizes, skip=bool(seed % 2))


@pytest.mark.parametrize("seed", range(40))
def test_random_byte_fallback_runs_stream_exactly(metaspace, seed):
    """Mostly <0xNN> tokens: valid and invalid UTF-8 runs, broken up by words and special tokens."""
    rng = random.Random(seed)
    byte_ids = [metaspace.inner.token_to_id(f"<0x{b:02X}>") for b in range(256)]
    special_ids = [metaspace.inner.token_to_id(t) for t in ("<unk>", "<s>", "</s>")]
    pools = [byte_ids] * 6 + [special_ids] * 2 + [range(metaspace.vocab_size)] * 2
    ids = [rng.choice(rng.choice(pools)) for _ in range(30)]
    assert_streams_like_decode(metaspace, ids, [rng.randint(1, 3)], skip=bool(seed % 2))


def test_byte_level_multibyte_character_is_held_until_complete(byte_level):
    ids = byte_level.encode("世", add_special_tokens=False)
    assert len(ids) == 3
    assert stream(byte_level, ids, [1]) == ["", "", "世", ""]


def test_byte_fallback_emoji_waits_for_the_end_of_its_byte_run(metaspace):
    ids = metaspace.encode("🎉 fox", add_special_tokens=False)
    tokens = [metaspace.inner.id_to_token(i) for i in ids]
    assert tokens[:5] == ["▁", "<0xF0>", "<0x9F>", "<0x8E>", "<0x89>"]
    deltas = stream(metaspace, ids, [1])
    assert deltas[:5] == ["", "", "", "", ""]
    assert "".join(deltas) == "🎉 fox"


@pytest.mark.parametrize(
    "tokens, skip",
    [
        (("<0x4B>", "<0xE4>", "<0xB8>", "▁the"), True),
        (("<0x4B>", "<s>", "<0xE4>", "<0xB8>", "▁the"), True),  # a skipped special does not end the run
    ],
)
def test_byte_run_turned_invalid_later_is_never_emitted_early(metaspace, tokens, skip):
    """ByteFallback decodes a whole invalid run to U+FFFD, even a valid 'K' at its start.

    tokenizers' DecodeStream raises 'Invalid prefix encountered' here.
    """
    ids = [metaspace.inner.token_to_id(t) for t in tokens]
    expected = metaspace.decode(ids, skip_special_tokens=skip)
    assert expected.startswith("\ufffd")
    assert "".join(stream(metaspace, ids, [1], skip)) == expected


def test_metaspace_keeps_spaces_between_tokens_and_drops_the_first(metaspace):
    ids = metaspace.encode("Hello the quick fox", add_special_tokens=False)
    assert [metaspace.inner.id_to_token(i) for i in ids] == ["▁Hello", "▁the", "▁quick", "▁fox"]
    assert stream(metaspace, ids, [1]) == ["Hello", " the", " quick", " fox", ""]


def test_byte_level_leading_space_tokens(byte_level):
    ids = byte_level.encode(" the quick", add_special_tokens=False)
    assert "".join(stream(byte_level, ids, [1])) == " the quick"
    assert stream(byte_level, ids, [1])[0].startswith(" ")


def test_truncated_character_is_flushed_as_replacement(byte_level):
    ids = byte_level.encode("ok 世", add_special_tokens=False)[:-1]
    deltas = stream(byte_level, ids, [1])
    assert "\ufffd" not in "".join(deltas[:-1])
    assert deltas[-1] == "\ufffd" == byte_level.decode(ids)[-1]


def test_push_after_flush_raises_and_flush_is_idempotent(byte_level):
    detokenizer = IncrementalDetokenizer(byte_level, [])
    assert detokenizer.push(byte_level.encode("hi", add_special_tokens=False)) == "hi"
    assert detokenizer.flush() == ""
    assert detokenizer.flush() == ""
    with pytest.raises(RuntimeError):
        detokenizer.push([5])


class CountingTokenizer:
    """Wraps a Tokenizer and records how many ids each decode call gets."""

    def __init__(self, inner: Tokenizer) -> None:
        self._inner = inner
        self.decode_lengths: list[int] = []

    def decode(self, ids, skip_special_tokens=True):
        self.decode_lengths.append(len(ids))
        return self._inner.decode(ids, skip_special_tokens)

    def __getattr__(self, name):
        return getattr(self._inner, name)


def longest_byte_run(tokenizer: Tokenizer, ids: list[int]) -> int:
    longest = current = 0
    for token_id in ids:
        current = current + 1 if tokenizer.is_byte_fallback(token_id) else 0
        longest = max(longest, current)
    return longest


@pytest.mark.parametrize("chunk, texts", [(1, TEXTS), (4, TEXTS[:2])])
def test_each_step_decodes_only_a_short_window(tokenizer, chunk, texts):
    """No step re-decodes the whole output. (Chunks that keep ending inside a multi-byte character
    let a window grow until one ends on a character boundary, hence only ASCII text for chunk 4.)"""
    counting = CountingTokenizer(tokenizer)
    ids = tokenizer.encode(" ".join(texts) * 20, add_special_tokens=False)
    assert len(ids) > 300
    detokenizer = IncrementalDetokenizer(counting, [])
    for start in range(0, len(ids), chunk):
        detokenizer.push(ids[start : start + chunk])
    detokenizer.flush()
    assert detokenizer.text == tokenizer.decode(ids)
    # A window spans the last emitted chunk plus what is held back: at most an open byte-fallback run.
    assert max(counting.decode_lengths) <= 2 * chunk + longest_byte_run(tokenizer, ids) + 8
    assert len(counting.decode_lengths) <= 2 * len(ids) / chunk + 2
