"""Token ids -> text pieces while generating: incremental detokenization and stop strings.

Decoding one token at a time breaks characters that span several byte-level tokens (an emoji, most
CJK text) and drops or doubles spaces with some tokenizers. :class:`IncrementalDetokenizer` decodes
a short window of recent tokens instead and emits only text that is complete, so the streamed pieces
join to exactly ``tokenizer.decode(all_ids)``. :class:`StopScanner` cuts the text at the first stop
string while holding back only the few characters that might still become one.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

__all__ = ["IncrementalDetokenizer", "StopScanner", "stream_pieces"]

_INCOMPLETE = "\ufffd"  # what decode() yields for a character whose bytes have not all arrived


class IncrementalDetokenizer:
    """Turn token ids into text pieces one id at a time (the offsets technique vLLM and TGI use).

    ``prefix_offset:read_offset`` is a window of already-emitted tokens decoded for context (so a
    tokenizer's spacing rules see the previous token); text past the window's decoded length is new.
    """

    def __init__(self, tokenizer: Any, *, skip_special_tokens: bool = True):
        self.tokenizer = tokenizer
        self.skip_special_tokens = skip_special_tokens
        self.ids: list[int] = []
        self.prefix_offset = 0
        self.read_offset = 0

    def _decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=self.skip_special_tokens)

    def push(self, token_id: int) -> str:
        """Add one token; return the new complete text ("" while a character is still incomplete)."""
        self.ids.append(int(token_id))
        seen = self._decode(self.ids[self.prefix_offset : self.read_offset])
        text = self._decode(self.ids[self.prefix_offset :])
        if len(text) > len(seen) and not text.endswith(_INCOMPLETE):
            self.prefix_offset, self.read_offset = self.read_offset, len(self.ids)
            return text[len(seen) :]
        return ""

    def flush(self) -> str:
        """Whatever text is still held back (e.g. bytes of a character cut off by ``max_new_tokens``)."""
        seen = self._decode(self.ids[self.prefix_offset : self.read_offset])
        text = self._decode(self.ids[self.prefix_offset :])
        self.prefix_offset = self.read_offset = len(self.ids)
        return text[len(seen) :]


class StopScanner:
    """Cut streamed text before the first occurrence of any stop string.

    Text that could be the start of a stop string is held back until the next piece decides it.
    """

    def __init__(self, stops: Iterable[str]):
        self.stops = [s for s in stops if s]
        self.pending = ""
        self.stopped = False

    def feed(self, piece: str) -> str:
        """Add a piece; return the text that is safe to emit. Sets :attr:`stopped` at a stop string."""
        if not self.stops:
            return piece
        text = self.pending + piece
        hits = [i for i in (text.find(s) for s in self.stops) if i >= 0]
        if hits:
            self.stopped, self.pending = True, ""
            return text[: min(hits)]
        hold = max((n for s in self.stops for n in range(1, len(s)) if text.endswith(s[:n])), default=0)
        self.pending = text[len(text) - hold :] if hold else ""
        return text[: len(text) - hold]

    def flush(self) -> str:
        """The held-back text, at the end of generation (it never completed a stop string)."""
        text, self.pending = self.pending, ""
        return text


def stream_pieces(tokenizer: Any, token_ids: Iterable[int], stop: Iterable[str] = ()) -> Iterator[str]:
    """Text pieces for a stream of generated ids; stops consuming ``token_ids`` at a stop string.

    The pieces join to ``tokenizer.decode(ids, skip_special_tokens=True)`` cut before the first stop string.
    """
    detok, scanner = IncrementalDetokenizer(tokenizer), StopScanner(stop)
    for token in token_ids:
        piece = scanner.feed(detok.push(token))
        if piece:
            yield piece
        if scanner.stopped:
            return
    tail = scanner.feed(detok.flush())
    if not scanner.stopped:
        tail += scanner.flush()
    if tail:
        yield tail
