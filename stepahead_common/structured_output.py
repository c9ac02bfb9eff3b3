"""Structured output (guided decoding) formats as llguidance grammars, shared by the scheduler and the executor.

The scheduler checks a request's ``StructuredOutput`` here before queuing it (a bad schema, regex or grammar is
INVALID_ARGUMENT naming the field); the executor compiles the same grammar into a token matcher that masks each
sampled row. Both use llguidance (Rust, no torch): grammars are compiled against the model's own tokenizer, so the
mask allows exactly the tokens whose bytes keep the output a prefix of the format.
"""

from __future__ import annotations

import json

import llguidance

from stepahead_common.json_text import parse_json_text
from stepahead_proto import sampling_pb2

MAX_FORMAT_CHARS = 64 * 1024
"""Longest schema, regex or grammar text accepted (and the most characters of all choices together)."""
MAX_CHOICES = 1024
JSON_OPTIONS = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}
"""JSON is written as Python's json.dumps writes it: free whitespace lets small models emit newlines forever."""
FIELD = "sampling.structured_output"


class StructuredOutputError(ValueError):
    """A structured output format is malformed; ``field`` names the part (``sampling.structured_output.regex``)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.reason = message


def parser_limits() -> llguidance.LLParserLimits:
    """Resource limits of compiling and matching one grammar (llguidance's defaults, concise errors)."""
    return llguidance.LLParserLimits(verbose_errors=False)


def grammar_of(format_: sampling_pb2.StructuredOutput) -> str:
    """The llguidance grammar of a format; StructuredOutputError naming the field when it is malformed (a grammar
    that parses here can still fail to compile: ``grammar_error`` checks that)."""
    kind = format_.WhichOneof("kind")
    if kind is None:
        raise StructuredOutputError(FIELD, "set one of json_schema, json_object, regex, grammar or choice")
    field = f"{FIELD}.{kind}"
    if kind == "json_object":
        if not format_.json_object:
            raise StructuredOutputError(field, "must be true when set (unset the format for free text)")
        return _json_grammar({"type": "object"})
    if kind == "choice":
        return _choice_grammar(list(format_.choice.choices), f"{field}.choices")
    text: str = getattr(format_, kind)
    if not text.strip():
        raise StructuredOutputError(field, "must not be empty")
    if len(text) > MAX_FORMAT_CHARS:
        raise StructuredOutputError(field, f"{len(text)} characters; at most {MAX_FORMAT_CHARS}")
    if kind == "json_schema":
        schema = _parse_schema(text, field)
        try:
            return _json_grammar(schema)
        except RecursionError as error:
            raise StructuredOutputError(field, "is nested too deeply") from error
        except ValueError as error:  # llguidance's reading of the schema (its own nesting limit, ...)
            raise StructuredOutputError(field, str(error)) from error
    if kind == "regex":
        return llguidance.LLMatcher.grammar_from_regex(text)
    try:
        return llguidance.grammar_from("grammar", text)
    except ValueError as error:
        raise StructuredOutputError(field, str(error)) from error


def grammar_error(grammar: str, tokenizer: llguidance.LLTokenizer) -> str | None:
    """Why ``grammar`` cannot be matched against ``tokenizer`` (None when it can): a bad regex, an undefined rule,
    an unsupported schema keyword, a grammar past the resource limits. Compiling may take up to ~1 s for huge
    grammars (it releases the GIL)."""
    message = llguidance.LLMatcher.validate_grammar(grammar, tokenizer, limits=parser_limits())
    return message or None


def grammar_tokenizer(tokenizer_json: str, vocab_size: int, eos_token_ids: list[int]) -> llguidance.LLTokenizer:
    """llguidance's view of the model's tokenizer, from tokenizer.json's text (~0.25 s to build for a 49k vocabulary:
    build once). ``vocab_size`` is the model's output width (masks cover every logit); the EOS ids are what a
    complete format allows next."""
    if not eos_token_ids:
        raise ValueError("structured output needs the model's EOS token id")
    return llguidance.LLTokenizer(tokenizer_json, n_vocab=vocab_size, eos_token=list(eos_token_ids))


def _parse_schema(text: str, field: str) -> object:
    try:
        schema = parse_json_text(text)
    except ValueError as error:
        raise StructuredOutputError(field, str(error)) from error
    if schema is False:
        raise StructuredOutputError(field, "the schema false accepts no value")
    if schema is True:
        return {}
    if not isinstance(schema, dict):
        raise StructuredOutputError(field, f"a JSON Schema is an object or a boolean, got {type(schema).__name__}")
    return schema


def _json_grammar(schema: object) -> str:
    return llguidance.LLMatcher.grammar_from_json_schema(json.dumps(schema), overrides=JSON_OPTIONS)  # type: ignore[arg-type]


def _choice_grammar(choices: list[str], field: str) -> str:
    if not choices:
        raise StructuredOutputError(field, "at least one choice is required")
    if len(choices) > MAX_CHOICES:
        raise StructuredOutputError(field, f"{len(choices)} choices; at most {MAX_CHOICES}")
    for index, choice in enumerate(choices):
        if not choice:
            raise StructuredOutputError(f"{field}[{index}]", "must not be empty")
    total = sum(len(choice) for choice in choices)
    if total > MAX_FORMAT_CHARS:
        raise StructuredOutputError(field, f"{total} characters in all; at most {MAX_FORMAT_CHARS}")
    return llguidance.LLMatcher.grammar_from_lark("start: " + " | ".join(json.dumps(c) for c in choices))
