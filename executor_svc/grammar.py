"""Per-request grammar matchers of structured output on the executor.

A request with ``sampling.structured_output`` gets a ``RequestGrammar``: an llguidance matcher fed every output
token once it is on the host. Before a step samples the request, the matcher gives one bit mask per sampled row:
row 0 for the next token, row j for the token after drafts 1..j (the matcher walks the drafts and rolls back), so
verifying drafts keeps the masked distribution and speculation stays lossless. Such a request's steps are never
deferred: its mask needs the previous token on the host. Its drafts are shaped by the format too
(``constrain_drafts``): the tokens the format forces are drafted, and no draft it forbids.
"""

from __future__ import annotations

from collections import OrderedDict
from pathlib import Path

import llguidance
import numpy as np
from llguidance.numpy import fill_next_token_bitmask

from executor_svc.token_mask import mask_words
from stepahead_common.structured_output import grammar_of, grammar_tokenizer, parser_limits
from stepahead_proto import sampling_pb2

COMPILED_GRAMMARS_KEPT = 64
"""Compiled matchers kept for reuse: requests sharing a schema copy one instead of compiling it again."""


class GrammarError(ValueError):
    """A request's format cannot be compiled here (the scheduler checks formats first, so this is rare)."""


class RequestGrammar:
    """One request's position in its format: consumes its output tokens and gives the masks of its next rows."""

    def __init__(self, matcher: llguidance.LLMatcher, vocab_size: int) -> None:
        self._matcher = matcher
        self._words = mask_words(vocab_size)

    @property
    def words(self) -> int:
        """32-bit words of one row's mask."""
        return self._words

    def consume(self, token_ids: list[int]) -> None:
        """Advance past output tokens. A token the format forbids (only possible when the request was resumed with
        outputs from elsewhere) leaves the matcher in its error state, which allows only EOS from then on."""
        if token_ids:
            self._matcher.consume_tokens(token_ids)

    def masks(self, drafts: list[int]) -> np.ndarray:
        """int32 bit masks [len(drafts) + 1, words]: row j allows the tokens that may follow drafts 1..j. Rows
        after a draft the format forbids (or a padded slot, < 0) are never reached: they allow everything."""
        rows = np.full((len(drafts) + 1, self._words), -1, dtype=np.int32)
        fill_next_token_bitmask(self._matcher, rows, 0)
        walked = 0
        for j, draft in enumerate(drafts, start=1):
            if draft < 0 or self._matcher.try_consume_tokens([draft]) != 1:
                break
            walked += 1
            fill_next_token_bitmask(self._matcher, rows, j)
        if walked:
            self._matcher.rollback(walked)
        return rows

    def constrain_drafts(self, proposed: list[int], limit: int) -> list[int]:
        """At most ``limit`` drafts the format allows: where it forces the next tokens (a JSON key and its quotes,
        a regex's literal), those; elsewhere the drafter's ``proposed`` chain, up to its first token the format
        forbids (certain to be rejected) and only while every earlier draft was the drafter's own (its later
        tokens were drafted after them). Drafts are only proposals: verification against the masked target keeps
        the output exact whichever they are. The matcher is left where it was."""
        drafts: list[int] = []
        own = True
        while len(drafts) < limit:
            forced = self._matcher.compute_ff_tokens()[: limit - len(drafts)]
            if forced:
                taken = forced[: self._matcher.try_consume_tokens(forced)]
                own = own and proposed[len(drafts) : len(drafts) + len(taken)] == taken
                drafts += taken
                if len(taken) < len(forced):
                    break
                continue
            next_proposed = proposed[len(drafts) : len(drafts) + 1] if own else []
            if not next_proposed or self._matcher.try_consume_tokens(next_proposed) != 1:
                break
            drafts += next_proposed
        if drafts:
            self._matcher.rollback(len(drafts))
        return drafts

    @property
    def error(self) -> str | None:
        """The matcher's error, if it met one."""
        return self._matcher.get_error() if self._matcher.is_error() else None


class GrammarCompiler:
    """Compiles formats into matchers against the model's tokenizer (built on first use: ~0.25 s)."""

    def __init__(self, tokenizer_json: Path, vocab_size: int, eos_token_ids: list[int]) -> None:
        self.tokenizer_json = tokenizer_json
        self.vocab_size = vocab_size
        self.eos_token_ids = list(eos_token_ids)
        self._tokenizer: llguidance.LLTokenizer | None = None
        self._compiled: OrderedDict[str, llguidance.LLMatcher] = OrderedDict()

    @classmethod
    def for_model(cls, model_dir: str | Path, vocab_size: int, eos_token_ids: list[int]) -> GrammarCompiler | None:
        """The compiler of a model directory, or None when it has no tokenizer.json or EOS id to build one from."""
        tokenizer_json = Path(model_dir) / "tokenizer.json"
        if not tokenizer_json.is_file() or not eos_token_ids:
            return None
        return cls(tokenizer_json, vocab_size, eos_token_ids)

    def request_grammar(self, format_: sampling_pb2.StructuredOutput) -> RequestGrammar:
        """A fresh matcher at the start of the format; GrammarError when it does not compile."""
        try:
            grammar = grammar_of(format_)
        except ValueError as error:
            raise GrammarError(str(error)) from error
        compiled = self._compiled.get(grammar)
        if compiled is None:
            compiled = llguidance.LLMatcher(self._llg_tokenizer(), grammar, log_level=0, limits=parser_limits())
            if compiled.is_error():
                raise GrammarError(f"sampling.structured_output: {compiled.get_error()}")
            self._compiled[grammar] = compiled
            if len(self._compiled) > COMPILED_GRAMMARS_KEPT:
                self._compiled.popitem(last=False)
        else:
            self._compiled.move_to_end(grammar)
        return RequestGrammar(compiled.deep_copy(), self.vocab_size)

    def _llg_tokenizer(self) -> llguidance.LLTokenizer:
        if self._tokenizer is None:
            text = self.tokenizer_json.read_text(encoding="utf-8")
            self._tokenizer = grammar_tokenizer(text, self.vocab_size, self.eos_token_ids)
        return self._tokenizer
