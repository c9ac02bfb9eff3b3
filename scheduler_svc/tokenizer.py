"""The model's tokenizer and chat template, loaded without torch or transformers."""

from __future__ import annotations

import functools
import json
import re
import secrets
import threading
from datetime import datetime
from pathlib import Path
from typing import Any, NoReturn

import jinja2
import jinja2.ext
import llguidance
import tokenizers
from jinja2.sandbox import ImmutableSandboxedEnvironment

from stepahead_common.structured_output import grammar_tokenizer

_BYTE_TOKEN = re.compile(r"<0x[0-9A-Fa-f]{2}>")
_SPECIAL_TOKEN_NAMES = ("bos_token", "eos_token", "unk_token", "pad_token", "sep_token", "cls_token", "mask_token")


class ContinuationError(ValueError):
    """``continue_final_message`` cannot be honoured: the template does not render the last message's content as
    given (it drops or rewrites part of it), so there is no place to cut the prompt."""


class TemplateSourceError(ValueError):
    """A request's own chat template does not compile or fails to render."""


class Tokenizer:
    """The model's tokenizer (tokenizers library) and chat template (jinja2), loaded from an HF model directory."""

    def __init__(
        self,
        inner: tokenizers.Tokenizer,
        chat_template: str | None,
        special_tokens: dict[str, str],
        eos_token_ids: list[int],
        release_gil: bool = False,
    ) -> None:
        self._inner = inner
        self._release_gil = release_gil
        self._chat_template_source = chat_template
        self._compiled_template: jinja2.Template | None = None
        self.special_tokens = dict(special_tokens)
        self.eos_token_ids = list(eos_token_ids)
        self.vocab_size = inner.get_vocab_size(with_added_tokens=True)
        self._special_ids = frozenset(
            token_id for token_id, token in inner.get_added_tokens_decoder().items() if token.special
        )
        self._byte_fallback_ids = _byte_fallback_ids(inner)
        self.byte_level = inner.decoder is not None and "ByteLevel" in _decoder_types(
            json.loads(inner.decoder.__getstate__())
        )
        """Whether tokens are GPT-2 style byte-level strings (each character stands for one byte)."""
        self._grammar_tokenizers: dict[tuple[int, tuple[int, ...]], llguidance.LLTokenizer] = {}
        self._grammar_lock = threading.Lock()

    @classmethod
    def from_dir(cls, model_dir: str | Path, release_gil: bool = False, chat_template: str | None = None) -> Tokenizer:
        """Load tokenizer.json, the chat template, special tokens and EOS ids from an HF model directory.

        ``chat_template``: Jinja source that replaces the model's chat template (the scheduler's --chat-template);
        TemplateSourceError when it does not compile.

        ``release_gil``: encode through ``encode_batch``, which releases the GIL while it works, so that a long
        prompt tokenized in a worker thread leaves the event loop running (the scheduler's service). Only for a
        process that runs ``tokenizers`` with TOKENIZERS_PARALLELISM=false or never forks: with parallelism on,
        ``encode_batch`` starts rayon's thread pool, and a process forked after that can hang in it."""
        model_dir = Path(model_dir)
        tokenizer_file = model_dir / "tokenizer.json"
        if not tokenizer_file.is_file():
            raise FileNotFoundError(f"no tokenizer.json in {model_dir}")
        inner = tokenizers.Tokenizer.from_file(str(tokenizer_file))
        tokenizer_config = _read_json(model_dir / "tokenizer_config.json")
        special_tokens = _special_tokens(tokenizer_config, _read_json(model_dir / "special_tokens_map.json"))
        if chat_template is not None:
            check_template_compiles(chat_template)
        return cls(
            inner=inner,
            chat_template=chat_template if chat_template is not None else _chat_template(model_dir, tokenizer_config),
            special_tokens=special_tokens,
            eos_token_ids=_eos_token_ids(model_dir, inner, special_tokens.get("eos_token")),
            release_gil=release_gil,
        )

    @property
    def inner(self) -> tokenizers.Tokenizer:
        """The underlying ``tokenizers.Tokenizer``."""
        return self._inner

    @property
    def chat_template(self) -> str | None:
        """The Jinja chat template source, or None if the model has none."""
        return self._chat_template_source

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        """Token ids for ``text`` (with the post-processor's BOS/EOS when ``add_special_tokens``); the same ids
        either way, released GIL or not (``from_dir``)."""
        if self._release_gil:
            return self._inner.encode_batch([text], add_special_tokens=add_special_tokens)[0].ids
        return self._inner.encode(text, add_special_tokens=add_special_tokens).ids

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        """Text for ``ids`` through the tokenizer's decoder."""
        return self._inner.decode(list(ids), skip_special_tokens=skip_special_tokens)

    def grammar_tokenizer(self, vocab_size: int, eos_token_ids: list[int]) -> llguidance.LLTokenizer:
        """llguidance's view of this tokenizer, for checking structured output formats: built on first use (~0.25 s
        for a 49k vocabulary; callers run it off the event loop) and kept."""
        key = (vocab_size, tuple(eos_token_ids))
        with self._grammar_lock:
            if key not in self._grammar_tokenizers:
                self._grammar_tokenizers[key] = grammar_tokenizer(self._inner.to_str(), vocab_size, list(eos_token_ids))
            return self._grammar_tokenizers[key]

    def is_special(self, token_id: int) -> bool:
        """Whether ``token_id`` is a special added token (such as BOS, EOS or a chat marker)."""
        return token_id in self._special_ids

    def is_byte_fallback(self, token_id: int) -> bool:
        """Whether ``token_id`` is a ``<0xNN>`` token that the decoder turns into a raw byte (ByteFallback)."""
        return token_id in self._byte_fallback_ids

    def render_chat(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None = None,
        *,
        add_generation_prompt: bool = True,
        continue_final_message: bool = False,
        template_kwargs: dict[str, Any] | None = None,
        documents: list[dict[str, Any]] | None = None,
        template_source: str | None = None,
    ) -> str:
        """The chat template rendered for ``messages``, by default with the generation prompt appended.

        ``tools``: what the template receives as ``tools`` (None: no tools), as HF transformers passes them; a
        message may carry ``tool_calls`` (an assistant's) and ``tool_call_id`` (a tool's), as in HF's format.
        ``add_generation_prompt``: the template's variable of that name (the header of the assistant's next
        message). ``continue_final_message``: the text ends with the last message's content, unterminated, for the
        model to continue (see _continued); needs ``add_generation_prompt`` false, as in transformers.
        ``template_kwargs``: further variables for the template (a Qwen3 template's ``enable_thinking``); none may
        be one of template_names(). ``documents``: what the template receives as ``documents`` (retrieval-augmented
        generation: HF's {"title", "text"} objects; None: none). ``template_source``: a request's own template, used
        instead of the model's (compiled ones are cached); its failures raise TemplateSourceError.
        Raises ValueError when there is no template or it fails (including ``raise_exception``, a TypeError such
        as a filter given the wrong kind of value by the request's data, and recursion too deep for a nested value),
        ContinuationError when the last message cannot be continued.
        """
        if continue_final_message and add_generation_prompt:
            raise ValueError("continue_final_message needs add_generation_prompt false")
        clashing = sorted(set(template_kwargs or {}) & template_names())
        if clashing:
            raise ValueError(f"template kwargs {', '.join(clashing)} are set by the server itself")
        template = self._template() if template_source is None else _request_template(template_source)
        failed = ValueError if template_source is None else TemplateSourceError
        given, marker = messages, ""
        if continue_final_message:
            messages, marker = _marked_final_message(given)
        try:
            rendered = template.render(
                **(template_kwargs or {}),
                messages=messages,
                add_generation_prompt=add_generation_prompt,
                tools=tools,
                documents=documents,
                **self.special_tokens,
            )
        except (jinja2.TemplateError, TypeError) as error:
            raise failed(f"chat template failed: {error}") from error
        except RecursionError as error:  # e.g. tojson of a deeply nested value from the request
            raise failed("chat template failed: a value is nested too deeply") from error
        return _continued(rendered, given[-1]["content"], marker) if marker else rendered

    def apply_chat_template(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None,
                            **controls: Any) -> list[int]:
        """Token ids of the rendered chat (see render_chat, whose keywords ``controls`` are); the template supplies
        special tokens, so none are added."""
        return self.encode(self.render_chat(messages, tools, **controls), add_special_tokens=False)

    def _template(self) -> jinja2.Template:
        if self._chat_template_source is None:
            raise ValueError("this model has no chat template (chat_template.jinja or tokenizer_config.json)")
        if self._compiled_template is None:
            try:
                self._compiled_template = _chat_environment().from_string(self._chat_template_source)
            except jinja2.TemplateError as error:
                raise ValueError(f"chat template does not compile: {error}") from error
        return self._compiled_template


class _GenerationTag(jinja2.ext.Extension):
    """Accept HF's ``{% generation %}...{% endgeneration %}`` marker and render its body unchanged."""

    tags = {"generation"}

    def parse(self, parser: jinja2.parser.Parser) -> jinja2.nodes.Node:
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return jinja2.nodes.Scope(body).set_lineno(lineno)


def _raise_exception(message: str) -> NoReturn:
    raise jinja2.TemplateError(message)


def _tojson(value: Any, ensure_ascii: bool = False, indent: int | None = None,
            separators: tuple[str, str] | None = None, sort_keys: bool = False) -> str:
    # Jinja's own tojson HTML-escapes '<', '>', '&' and "'"; chat templates expect plain JSON, as in HF.
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _strftime_now(date_format: str) -> str:
    return datetime.now().strftime(date_format)


def _marked_final_message(messages: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], str]:
    """``messages`` with a marker after the last one's content (a copy: the caller's are left alone), and the
    marker: a random word and a space, which no message holds by chance, to find where that content ends in the
    rendered text."""
    if not messages:
        raise ContinuationError("there is no message to continue")
    final = messages[-1]
    content = final.get("content")
    if not isinstance(content, str):
        raise ContinuationError("the last message has no text content to continue")
    marker = f"CONTINUE{secrets.token_hex(8).upper()} "
    return [*messages[:-1], {**final, "content": content + marker}], marker


def _continued(rendered: str, content: str, marker: str) -> str:
    """The rendered chat cut where the last message's content ends (its marker, _marked_final_message), as HF
    transformers' continue_final_message cuts it: right before the marker when the template kept the marker's
    space, else (the template trimmed the content's end) before it with trailing whitespace dropped, as the template
    would have trimmed the content itself. ContinuationError when the content or the marker is not in the text."""
    word = marker.strip()
    if content.strip() not in rendered or word not in rendered:
        raise ContinuationError("the chat template does not render the last message's content as given, so the "
                                "prompt cannot end with it")
    cut = rendered.rindex(word)
    if rendered.startswith(marker, cut):
        return rendered[:cut]
    return rendered[:cut].rstrip()


def check_template_compiles(source: str) -> None:
    """Raise TemplateSourceError ("does not compile: ...") unless ``source`` compiles as a chat template."""
    _request_template(source)


@functools.lru_cache(maxsize=32)
def _request_template(source: str) -> jinja2.Template:
    """A request's chat template, compiled in the model template's environment; TemplateSourceError when it does not
    compile."""
    try:
        return _chat_environment().from_string(source)
    except (jinja2.TemplateError, RecursionError) as error:
        raise TemplateSourceError(f"does not compile: {error}") from error


def _chat_environment() -> ImmutableSandboxedEnvironment:
    """A Jinja environment that renders chat templates the way HF transformers does."""
    environment = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[_GenerationTag, jinja2.ext.loopcontrols]
    )
    environment.filters["tojson"] = _tojson
    environment.globals["raise_exception"] = _raise_exception
    environment.globals["strftime_now"] = _strftime_now
    return environment


@functools.cache
def template_names() -> frozenset[str]:
    """Names a chat template gets from the server itself: the variables render_chat sets (the special token names
    all reserved, whether the model has the token or not; ``continue_final_message``, which HF does not pass either,
    as the request field of that name) and the environment's functions (``raise_exception``, ``strftime_now``,
    ``namespace``, ``range``, ...). Extra template variables may not take these names."""
    return frozenset({"messages", "tools", "documents", "add_generation_prompt", "continue_final_message",
                      *_SPECIAL_TOKEN_NAMES, *_chat_environment().globals})


def _decoder_types(config: Any) -> set[str]:
    """Every decoder "type" in a serialised decoder config, walking into Sequence decoders."""
    if isinstance(config, dict):
        found = {config["type"]} if isinstance(config.get("type"), str) else set()
        for value in config.values():
            found |= _decoder_types(value)
        return found
    if isinstance(config, list):
        return set().union(*(_decoder_types(item) for item in config)) if config else set()
    return set()


def _byte_fallback_ids(inner: tokenizers.Tokenizer) -> frozenset[int]:
    """Ids of ``<0xNN>`` tokens when the decoder has a ByteFallback step (Llama-2 / Mistral style), else none."""
    if inner.decoder is None or "ByteFallback" not in _decoder_types(json.loads(inner.decoder.__getstate__())):
        return frozenset()
    return frozenset(
        token_id for token, token_id in inner.get_vocab(with_added_tokens=False).items() if _BYTE_TOKEN.fullmatch(token)
    )


def _read_json(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    with path.open(encoding="utf-8") as file:
        loaded: dict[str, Any] = json.load(file)
        return loaded


def _token_content(value: Any) -> str | None:
    """A special token entry is either a string or a serialised AddedToken dict."""
    if isinstance(value, dict):
        return value.get("content")
    return value if isinstance(value, str) else None


def _special_tokens(tokenizer_config: dict[str, Any], special_tokens_map: dict[str, Any]) -> dict[str, str]:
    """Named special tokens (bos_token, eos_token, ...): tokenizer_config.json first, then special_tokens_map.json."""
    found = {}
    for name in _SPECIAL_TOKEN_NAMES:
        content = _token_content(tokenizer_config.get(name)) or _token_content(special_tokens_map.get(name))
        if content is not None:
            found[name] = content
    return found


def _chat_template(model_dir: Path, tokenizer_config: dict[str, Any]) -> str | None:
    """chat_template.jinja if present, else tokenizer_config.json's chat_template (the "default" one if a list), else
    chat_template.json's (where vision-language checkpoints' processors keep theirs: Qwen2-VL, Qwen2.5-VL)."""
    template_file = model_dir / "chat_template.jinja"
    if template_file.is_file():
        return template_file.read_text(encoding="utf-8")
    template = tokenizer_config.get("chat_template")
    if isinstance(template, list):
        named = {entry.get("name"): entry.get("template") for entry in template if isinstance(entry, dict)}
        return named.get("default")
    if template is None:
        template = _read_json(model_dir / "chat_template.json").get("chat_template")
    return template


def _as_id_list(value: Any) -> list[int] | None:
    if isinstance(value, int) and not isinstance(value, bool):
        return [value]
    if isinstance(value, list) and value and all(isinstance(v, int) for v in value):
        return list(value)
    return None


def _eos_token_ids(model_dir: Path, inner: tokenizers.Tokenizer, eos_token: str | None) -> list[int]:
    """EOS ids from generation_config.json, else config.json (or its text_config: vision-language checkpoints),
    else the tokenizer's eos_token."""
    for file_name in ("generation_config.json", "config.json"):
        values = _read_json(model_dir / file_name)
        ids = _as_id_list(values.get("eos_token_id"))
        if ids is None and isinstance(values.get("text_config"), dict):
            ids = _as_id_list(values["text_config"].get("eos_token_id"))
        if ids is not None:
            return ids
    if eos_token is not None:
        token_id = inner.token_to_id(eos_token)
        if token_id is not None:
            return [token_id]
    return []
