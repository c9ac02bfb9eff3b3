"""Tiny HF tokenizer directories trained in the test process (seed-free: BPE training is deterministic).

Two families cover the decoders that matter for detokenization:
- ``byte_level``: GPT-2 / SmolLM2 / Llama-3 style byte-level BPE, ChatML template in chat_template.jinja,
  EOS ids from generation_config.json;
- ``metaspace``: Llama-2 / Mistral style SentencePiece-like BPE with byte fallback (CJK and emoji are
  not in its training text, so they decode from <0xNN> tokens), template in tokenizer_config.json,
  EOS id from the tokenizer's eos_token.
"""

from __future__ import annotations

import json
from pathlib import Path

from tokenizers import AddedToken, decoders, models, pre_tokenizers, trainers
from tokenizers import Tokenizer as RawTokenizer

CORPUS = [
    "Hello world, this is a small corpus for a tiny tokenizer.",
    "The quick brown fox jumps over the lazy dog; the dog sleeps.",
    "Streaming text arrives token by token, and spaces matter:  two spaces, tabs\tand\nnew lines.",
    "Numbers 0 1 2 3 4 5 6 7 8 9 and punctuation ! ? . , ; : ' \" ( ) [ ] { } < > | / \\ - _ + = * & % $ # @",
    "Accents: café, naïve, über, señor.",
] * 20

CHATML_TEMPLATE = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a tiny test model.<|im_end|>\n' }}{% endif %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

LLAMA2_TEMPLATE = """{{ bos_token }}
{% for message in messages %}
    {% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}
        {{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}
    {% endif %}
    {% if message['role'] == 'user' %}
        {{ '[INST] ' + message['content'] | trim + ' [/INST]' }}
    {% else %}
        {{ ' ' + message['content'] | trim + ' ' + eos_token }}
    {% endif %}
{% endfor %}
{% if add_generation_prompt %}{{ '' }}{% endif %}
{{ {'n': messages | length, 'last': messages[-1]['content']} | tojson }}
"""


TOOLS_TEMPLATE = (
    "{% if tools %}<tools>{{ tools | tojson }}</tools>\n{% endif %}"
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] }}"
    "{% if message.tool_calls is defined %}{% for call in message.tool_calls %}"
    "<call>{{ call.function.name }} {{ call.function.arguments | tojson }}</call>{% endfor %}{% endif %}"
    "{% if message.tool_call_id is defined %}<id>{{ message.tool_call_id }}</id>{% endif %}"
    "{% if message.name is defined %}<name>{{ message.name }}</name>{% endif %}"
    "{{ '<|im_end|>\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
"""A ChatML-like template that renders ``tools``, each message's ``tool_calls`` (arguments as JSON, as HF templates
expect them: objects), ``tool_call_id`` and ``name``."""

THINKING_TEMPLATE = (
    "{% if persona is defined %}{{ '<|im_start|>system\n' + persona + '<|im_end|>\n' }}{% endif %}"
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' }}"
    "{% if message['role'] == 'assistant' %}"
    "{% if message.reasoning_content is defined %}{{ '<think>\n' + message.reasoning_content + '\n</think>\n\n' }}"
    "{% endif %}{{ message['content'] | trim }}"
    "{% else %}{{ message['content'] }}{% endif %}"
    "{{ '<|im_end|>\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}"
    "{% if enable_thinking is defined and not enable_thinking %}{{ '<think>\n\n</think>\n\n' }}{% endif %}"
    "{% endif %}"
)
"""A Qwen3-like ChatML template that reads two extra variables, ``enable_thinking`` (false: an empty think block after
the generation prompt) and ``persona`` (a system message first), trims assistants' contents (as Qwen3's does) and
writes an assistant's ``reasoning_content`` before its content in a think block."""


def _save(raw: RawTokenizer, directory: Path, special: dict[str, str], chat_template: str) -> None:
    """Save through transformers so the directory looks exactly like a real HF checkpoint's."""
    from transformers import PreTrainedTokenizerFast

    hf = PreTrainedTokenizerFast(tokenizer_object=raw, clean_up_tokenization_spaces=False, **special)
    hf.chat_template = chat_template
    hf.save_pretrained(str(directory))


def build_byte_level(directory: Path, template: str = CHATML_TEMPLATE, markers: bool = False) -> Path:
    """A byte-level BPE directory with ChatML specials; EOS ids [2, 0] in generation_config.json. ``markers``: the
    reasoning models' markers are single tokens, as in their vocabularies (THINKING_MARKERS)."""
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    raw = RawTokenizer(models.BPE())
    raw.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    raw.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400, special_tokens=specials, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    raw.train_from_iterator(CORPUS, trainer)
    if markers:
        raw.add_tokens([AddedToken(marker, special=False, normalized=False) for marker in THINK_MARKERS])
        raw.add_special_tokens(list(HARMONY_MARKERS))
    directory.mkdir(parents=True, exist_ok=True)
    special = {"bos_token": "<|im_start|>", "eos_token": "<|im_end|>", "unk_token": "<|endoftext|>"}
    _save(raw, directory, special, template)
    (directory / "generation_config.json").write_text(json.dumps({"eos_token_id": [2, 0]}))
    return directory


def build_tool_calling(directory: Path, markers: bool = False) -> Path:
    """The byte-level directory with TOOLS_TEMPLATE as its chat template (``markers``: as build_byte_level's)."""
    return build_byte_level(directory, TOOLS_TEMPLATE, markers)


def build_thinking(directory: Path, markers: bool = False) -> Path:
    """The byte-level directory with THINKING_TEMPLATE as its chat template (``markers``: as build_byte_level's)."""
    return build_byte_level(directory, THINKING_TEMPLATE, markers)


THINK_MARKERS = ("<think>", "</think>")
"""Qwen3's and DeepSeek-R1's thinking tags: added tokens, not special ones (they decode with skip_special_tokens)."""
HARMONY_MARKERS = ("<|start|>", "<|channel|>", "<|message|>", "<|end|>")
"""gpt-oss's message markers: special tokens."""


RAG_TEMPLATE = (
    "{% if documents %}<|im_start|>system\nDocuments:\n{% for doc in documents %}[{{ loop.index }}] "
    "{{ doc['title'] }}: {{ doc['text'] }}\n{% endfor %}<|im_end|>\n{% endif %}"
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
"""A retrieval-augmented template in the style of Command-R's: the documents, when given, in a system turn first."""


def build_rag(directory: Path) -> Path:
    """The byte-level directory with RAG_TEMPLATE as its chat template."""
    build_byte_level(directory)
    (directory / "chat_template.jinja").write_text(RAG_TEMPLATE)
    return directory


def build_metaspace(directory: Path) -> Path:
    """A Metaspace BPE directory with byte fallback and <s>/</s>; template kept in tokenizer_config.json."""
    specials = ["<unk>", "<s>", "</s>"]
    trained = RawTokenizer(models.BPE(unk_token="<unk>"))
    trained.pre_tokenizer = pre_tokenizers.Metaspace(prepend_scheme="first")
    trained.train_from_iterator(CORPUS, trainers.BpeTrainer(vocab_size=300, special_tokens=specials))
    model = json.loads(trained.to_str())["model"]
    vocab = dict(model["vocab"])
    for byte in range(256):
        vocab.setdefault(f"<0x{byte:02X}>", len(vocab))
    merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in model["merges"]]
    raw = RawTokenizer(models.BPE(vocab=vocab, merges=merges, unk_token="<unk>", byte_fallback=True))
    raw.pre_tokenizer = pre_tokenizers.Metaspace(prepend_scheme="first")
    raw.decoder = decoders.Sequence(
        [decoders.Metaspace(prepend_scheme="first"), decoders.ByteFallback(), decoders.Fuse()]
    )
    raw.add_special_tokens(specials)
    directory.mkdir(parents=True, exist_ok=True)
    _save(raw, directory, {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}, LLAMA2_TEMPLATE)
    _move_template_into_tokenizer_config(directory)
    return directory


def _move_template_into_tokenizer_config(directory: Path) -> None:
    """Older checkpoints keep the template as tokenizer_config.json["chat_template"]."""
    template_file = directory / "chat_template.jinja"
    config_file = directory / "tokenizer_config.json"
    config = json.loads(config_file.read_text())
    if template_file.is_file():
        config["chat_template"] = template_file.read_text()
        template_file.unlink()
    config_file.write_text(json.dumps(config))
