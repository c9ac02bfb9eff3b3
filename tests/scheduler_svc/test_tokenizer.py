"""Tests for scheduler_svc.tokenizer, checked against transformers.AutoTokenizer on the same directories."""

import json
from datetime import datetime
from pathlib import Path

import pytest
import tokenizers
from tiny_tokenizers import build_byte_level, build_metaspace

from scheduler_svc.tokenizer import TemplateSourceError, Tokenizer

TEXTS = [
    "Hello world",
    " leading space and  double  spaces",
    "new\nlines\n\n and\ttabs",
    "café naïve señor über",
    "中文字符 世界 and 日本語",
    "emoji 🎉😀 flags 🇫🇷 and zwj 👩‍💻",
    "special <|im_end|> and </s> inside text",
    "",
]

CONVERSATIONS = [
    [{"role": "user", "content": "Hi there"}],
    [
        {"role": "user", "content": " Héllo <&> 世界 🎉 "},
        {"role": "assistant", "content": "Hi! 😀"},
        {"role": "user", "content": "again, in 日本語?"},
    ],
    [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "a\nb"},
    ],
]


@pytest.fixture(
    scope="module", params=["byte_level", "metaspace", pytest.param("default_model", marks=pytest.mark.slow)]
)
def model_dir(request, tmp_path_factory) -> Path:
    """A tokenizer directory: the two tiny ones, and the real default model's."""
    if request.param == "default_model":
        env_dir = request.getfixturevalue("default_model_dir")
        return Path(env_dir)
    builder = build_byte_level if request.param == "byte_level" else build_metaspace
    return builder(tmp_path_factory.mktemp(request.param))


@pytest.fixture(scope="module")
def ours(model_dir) -> Tokenizer:
    return Tokenizer.from_dir(model_dir)


@pytest.fixture(scope="module")
def hf(model_dir):
    transformers = pytest.importorskip("transformers")
    return transformers.AutoTokenizer.from_pretrained(str(model_dir))


def hf_chat_ids(hf, messages) -> list[int]:
    encoded = hf.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=True)
    return list(encoded["input_ids"])


def test_vocab_size_counts_added_tokens(ours, hf):
    assert ours.vocab_size == len(hf)
    assert isinstance(ours.inner, tokenizers.Tokenizer)


@pytest.mark.parametrize("add_special_tokens", [True, False])
def test_encode_matches_transformers(ours, hf, add_special_tokens):
    for text in TEXTS:
        assert ours.encode(text, add_special_tokens) == hf.encode(text, add_special_tokens=add_special_tokens), text


@pytest.mark.parametrize("skip_special_tokens", [True, False])
def test_decode_matches_transformers(ours, hf, skip_special_tokens):
    for text in TEXTS:
        ids = hf.encode(text)
        expected = hf.decode(ids, skip_special_tokens=skip_special_tokens, clean_up_tokenization_spaces=False)
        assert ours.decode(ids, skip_special_tokens) == expected, text


def test_chat_template_matches_transformers(ours, hf):
    for messages in CONVERSATIONS:
        if messages[0]["role"] == "system" and "raise_exception" in (ours.chat_template or ""):
            continue  # the tiny Llama-2 template accepts only alternating user/assistant turns
        expected_text = hf.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        assert ours.render_chat(messages) == expected_text
        assert ours.apply_chat_template(messages) == hf_chat_ids(hf, messages)


def test_is_special_marks_added_special_tokens(ours, hf):
    assert hf.all_special_ids
    for token_id in hf.all_special_ids:
        assert ours.is_special(token_id)
    for token_id in ours.encode("Hello world", add_special_tokens=False):
        assert not ours.is_special(token_id)


def test_eos_ids_come_from_generation_config_first(tmp_path):
    directory = build_byte_level(tmp_path / "tok")
    assert Tokenizer.from_dir(directory).eos_token_ids == [2, 0]
    (directory / "generation_config.json").unlink()
    (directory / "config.json").write_text(json.dumps({"eos_token_id": 1}))
    assert Tokenizer.from_dir(directory).eos_token_ids == [1]
    # A vision-language checkpoint keeps its language model's EOS in text_config.
    (directory / "config.json").write_text(json.dumps({"text_config": {"eos_token_id": [1, 3]}}))
    assert Tokenizer.from_dir(directory).eos_token_ids == [1, 3]
    (directory / "config.json").unlink()
    assert Tokenizer.from_dir(directory).eos_token_ids == [2]  # <|im_end|>, the tokenizer's eos_token


def test_metaspace_dir_reads_template_and_eos_from_tokenizer_config(tmp_path):
    directory = build_metaspace(tmp_path / "tok")
    assert not (directory / "chat_template.jinja").exists()
    tokenizer = Tokenizer.from_dir(directory)
    assert tokenizer.special_tokens["bos_token"] == "<s>"
    assert tokenizer.eos_token_ids == [tokenizer.inner.token_to_id("</s>")]
    assert tokenizer.render_chat([{"role": "user", "content": "hi"}]).startswith("<s>")


def test_template_raise_exception_becomes_value_error(tmp_path):
    tokenizer = Tokenizer.from_dir(build_metaspace(tmp_path / "tok"))
    with pytest.raises(ValueError, match="roles must alternate"):
        tokenizer.apply_chat_template([{"role": "assistant", "content": "first"}])


def test_a_processors_chat_template_json_is_read_when_the_tokenizer_has_none(tmp_path):
    directory = build_byte_level(tmp_path / "tok")
    (directory / "chat_template.jinja").unlink()
    template = "{% for m in messages %}[{{ m.role }}]{{ m.content }}{% endfor %}"
    (directory / "chat_template.json").write_text(json.dumps({"chat_template": template}))
    assert Tokenizer.from_dir(directory).render_chat([{"role": "user", "content": "hi"}]) == "[user]hi"


def test_missing_or_broken_template_raises_value_error(tmp_path):
    directory = build_byte_level(tmp_path / "tok")
    (directory / "chat_template.jinja").unlink()
    with pytest.raises(ValueError, match="no chat template"):
        Tokenizer.from_dir(directory).render_chat([{"role": "user", "content": "hi"}])
    (directory / "chat_template.jinja").write_text("{% for m in messages %}")
    with pytest.raises(ValueError, match="does not compile"):
        Tokenizer.from_dir(directory).render_chat([{"role": "user", "content": "hi"}])


def test_a_given_chat_template_replaces_the_models_or_fills_its_absence(tmp_path):
    directory = build_byte_level(tmp_path / "tok")
    template = "{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}"
    assert Tokenizer.from_dir(directory, chat_template=template).render_chat([{"role": "user", "content": "hi"}]) == (
        "<user>hi")
    (directory / "chat_template.jinja").unlink()
    assert Tokenizer.from_dir(directory, chat_template=template).chat_template == template
    with pytest.raises(TemplateSourceError, match="does not compile"):
        Tokenizer.from_dir(directory, chat_template="{% for m in messages %}")


def test_missing_tokenizer_json_raises(tmp_path):
    with pytest.raises(FileNotFoundError, match="tokenizer.json"):
        Tokenizer.from_dir(tmp_path)


@pytest.fixture(scope="module")
def tiny_inner(tmp_path_factory) -> tokenizers.Tokenizer:
    return tokenizers.Tokenizer.from_file(str(build_byte_level(tmp_path_factory.mktemp("inner")) / "tokenizer.json"))


def with_template(inner: tokenizers.Tokenizer, template: str) -> Tokenizer:
    return Tokenizer(inner, template, {"bos_token": "<B>", "eos_token": "<E>"}, eos_token_ids=[0])


def test_environment_helpers_match_hf_semantics(tiny_inner):
    template = (
        "{{ bos_token }}{% for m in messages %}{% generation %}{{ m | tojson }}{% endgeneration %}"
        "{% if loop.first %}{% continue %}{% endif %}!{% endfor %}"
        "{{ strftime_now('%Y') }}{{ add_generation_prompt }}{{ eos_token }}"
    )
    rendered = with_template(tiny_inner, template).render_chat(
        [{"role": "user", "content": "<a & 'b'> é"}, {"role": "user", "content": "x"}]
    )
    year = datetime.now().strftime("%Y")
    expected = '<B>{"role": "user", "content": "<a & \'b\'> é"}{"role": "user", "content": "x"}!' + f"{year}True<E>"
    assert rendered == expected


def test_trim_and_lstrip_blocks(tiny_inner):
    template = "  {% if true %}\nA\n  {% endif %}\nB"
    assert with_template(tiny_inner, template).render_chat([]) == "A\nB"


def test_sandbox_blocks_unsafe_attribute_access(tiny_inner):
    template = "{{ messages.__class__.__mro__ }}"
    with pytest.raises(ValueError):
        with_template(tiny_inner, template).render_chat([])


def test_chat_template_from_tokenizer_config_list_uses_default(tmp_path):
    directory = build_byte_level(tmp_path / "tok")
    (directory / "chat_template.jinja").unlink()
    config = json.loads((directory / "tokenizer_config.json").read_text())
    config["chat_template"] = [{"name": "tool_use", "template": "T"}, {"name": "default", "template": "D"}]
    (directory / "tokenizer_config.json").write_text(json.dumps(config))
    assert Tokenizer.from_dir(directory).render_chat([]) == "D"


def test_special_tokens_map_is_a_fallback(tmp_path):
    directory = build_byte_level(tmp_path / "tok")
    config = json.loads((directory / "tokenizer_config.json").read_text())
    del config["eos_token"]
    (directory / "tokenizer_config.json").write_text(json.dumps(config))
    (directory / "special_tokens_map.json").write_text(json.dumps({"eos_token": {"content": "<|endoftext|>"}}))
    (directory / "generation_config.json").unlink()
    tokenizer = Tokenizer.from_dir(directory)
    assert tokenizer.special_tokens["eos_token"] == "<|endoftext|>"
    assert tokenizer.eos_token_ids == [0]


def test_byte_fallback_tokens_are_known_only_with_a_byte_fallback_decoder(tmp_path):
    metaspace = Tokenizer.from_dir(build_metaspace(tmp_path / "ms"))
    assert metaspace.is_byte_fallback(metaspace.inner.token_to_id("<0xE4>"))
    assert not metaspace.is_byte_fallback(metaspace.inner.token_to_id("</s>"))
    byte_level = Tokenizer.from_dir(build_byte_level(tmp_path / "bl"))
    assert not any(byte_level.is_byte_fallback(i) for i in range(byte_level.vocab_size))



def test_encoding_a_long_text_leaves_other_threads_running(tmp_path, monkeypatch):
    import threading
    import time

    monkeypatch.setenv("TOKENIZERS_PARALLELISM", "false")  # as the scheduler runs it: no rayon pool in this process
    ours = Tokenizer.from_dir(build_byte_level(tmp_path), release_gil=True)
    text = "The quick brown fox jumps over the lazy dog; the dog sleeps. " * 10000
    took: list[float] = []

    def encode() -> None:
        start = time.perf_counter()
        ours.encode(text)
        took.append(time.perf_counter() - start)

    worker = threading.Thread(target=encode)
    last, longest_gap = time.perf_counter(), 0.0
    worker.start()
    while worker.is_alive():  # this thread needs the GIL for every iteration
        now = time.perf_counter()
        longest_gap, last = max(longest_gap, now - last), now
    worker.join()
    assert longest_gap < took[0] / 2, (longest_gap, took[0])  # holding the GIL, the gap would be the whole encode
    assert ours.encode(text[:200]) == ours.inner.encode(text[:200]).ids
