"""Incremental detokenization of streamed output tokens."""

from __future__ import annotations

from scheduler_svc.tokenizer import Tokenizer

_REPLACEMENT_CHAR = "\ufffd"


class IncrementalDetokenizer:
    """Turns a growing list of output token ids into text deltas; never emits a broken UTF-8 character.

    Uses the prefix/read offset method (as vLLM and TGI do): ``ids[prefix:read]`` were decoded
    last time; text is emitted only when decoding ``ids[prefix:]`` extends that text and does not
    end in U+FFFD (an incomplete character). Each step decodes a window of only the last few
    tokens, never the whole output.

    The concatenated deltas plus :meth:`flush` equal ``tokenizer.decode(output_ids,
    skip_special_tokens)``. So that this holds exactly, two things are held back:

    - a trailing run of byte-fallback tokens (``<0xNN>``): the ByteFallback decoder turns the
      *whole* run into U+FFFD if any later byte makes it invalid UTF-8, so earlier bytes of the
      run are not final until a token that ends the run arrives;
    - the prompt is not used as decoding context. For Metaspace tokenizers the first output
      token's leading space is therefore dropped, exactly as ``decode(output_ids)`` drops it
      (vLLM and TGI, which decode in the prompt's context, would keep it).
    """

    def __init__(
        self, tokenizer: Tokenizer, prompt_token_ids: list[int], skip_special_tokens: bool = True
    ) -> None:
        # prompt_token_ids is part of the interface but deliberately unused (see the class docstring).
        del prompt_token_ids
        self._tokenizer = tokenizer
        self._skip_special_tokens = skip_special_tokens
        self._ids: list[int] = []
        self._prefix_offset = 0
        self._read_offset = 0
        self._prefix_text = ""
        self._text_parts: list[str] = []
        self._finished = False

    @property
    def text(self) -> str:
        """All text emitted so far."""
        if len(self._text_parts) > 1:
            self._text_parts = ["".join(self._text_parts)]
        return self._text_parts[0] if self._text_parts else ""

    @property
    def token_ids(self) -> list[int]:
        """A copy of every output token id pushed so far."""
        return list(self._ids)

    def push(self, token_ids: list[int]) -> str:
        """Add output tokens; return the text they made final ('' if it is still held back)."""
        if self._finished:
            raise RuntimeError("push after flush: the detokenizer has finished")
        self._ids.extend(token_ids)
        end = self._stable_end()
        if end <= self._read_offset:
            return ""
        window_text = self._decode(self._prefix_offset, end)
        if window_text.endswith(_REPLACEMENT_CHAR) or len(window_text) <= len(self._prefix_text):
            return ""
        if not window_text.startswith(self._prefix_text):
            return ""  # the decoder rewrote already-emitted text; wait for a window that extends it
        return self._emit(window_text[len(self._prefix_text) :], end)

    def flush(self) -> str:
        """Finish: return whatever is still held back, even an incomplete character (as U+FFFD)."""
        if self._finished:
            return ""
        self._finished = True
        end = len(self._ids)
        if end == self._read_offset:
            return ""
        window_text = self._decode(self._prefix_offset, end)
        if window_text.startswith(self._prefix_text):
            return self._emit(window_text[len(self._prefix_text) :], end)
        # Unreachable with the decoders LLM tokenizers use; fall back to the ground truth once.
        full_text = self._tokenizer.decode(self._ids, self._skip_special_tokens)
        return self._emit(full_text[len(self.text) :], end)

    def _emit(self, delta: str, end: int) -> str:
        """Record ``delta`` as emitted and slide the window so that ``ids[read:end]`` is the new prefix."""
        self._prefix_offset, self._read_offset = self._read_offset, end
        self._prefix_text = self._decode(self._prefix_offset, self._read_offset)
        self._text_parts.append(delta)
        return delta

    def _decode(self, start: int, end: int) -> str:
        return self._tokenizer.decode(self._ids[start:end], self._skip_special_tokens)

    def _stable_end(self) -> int:
        """End of the tokens whose text can no longer change: all of them unless a byte-fallback run is open."""
        end = len(self._ids)
        while end > self._read_offset and self._extends_byte_run(self._ids[end - 1]):
            end -= 1
        return end

    def _extends_byte_run(self, token_id: int) -> bool:
        # A skipped special token is removed before decoding, so it does not end a byte run either.
        tokenizer = self._tokenizer
        return tokenizer.is_byte_fallback(token_id) or (
            self._skip_special_tokens and tokenizer.is_special(token_id)
        )
