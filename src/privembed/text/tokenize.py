"""A lossless tokenizer: words, punctuation and whitespace, so that ``"".join(tokens) == text``.

Words are maximal runs of Unicode letters, digits and underscores (``\\w+``); every other
non-space character is a punctuation token of its own; runs of whitespace (spaces, tabs, newlines)
are kept as they are. Only word tokens are sanitised; the rest passes through unchanged.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

__all__ = ["Token", "detokenize", "restore_case", "tokenize"]

_TOKEN = re.compile(r"(?P<word>\w+)|(?P<space>\s+)|(?P<punct>[^\w\s])")


@dataclass(frozen=True)
class Token:
    """One token: its text, kind and character offset in the source."""

    text: str
    kind: Literal["word", "space", "punct"]
    start: int

    @property
    def is_word(self) -> bool:
        """Whether the token is a word (the only kind that is sanitised)."""
        return self.kind == "word"


def tokenize(text: str) -> list[Token]:
    """Split ``text`` into word, whitespace and punctuation tokens (lossless).

    Examples
    --------
    >>> [t.text for t in tokenize("Hello, World!\\n")]
    ['Hello', ',', ' ', 'World', '!', '\\n']
    >>> detokenize(tokenize("  a\\tb-c.  ")) == "  a\\tb-c.  "
    True
    """
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got text={text!r}.")
    out: list[Token] = []
    for m in _TOKEN.finditer(text):
        kind = m.lastgroup
        out.append(Token(m.group(), kind, m.start()))  # type: ignore[arg-type]
    return out


def detokenize(tokens: list[Token]) -> str:
    """Join tokens back into text."""
    return "".join(t.text for t in tokens)


def restore_case(template: str, word: str) -> str:
    """Give ``word`` the capitalisation pattern of ``template``.

    All-caps templates (two or more cased letters) give an all-caps word; a template starting
    with a capital gives a word starting with a capital (the rest as in the vocabulary);
    anything else gives the word as it is in the vocabulary.

    Examples
    --------
    >>> restore_case("NASA", "agency"), restore_case("Paris", "london"), restore_case("cat", "dog")
    ('AGENCY', 'London', 'dog')
    """
    cased = [ch for ch in template if ch.isalpha()]
    if len(cased) >= 2 and all(ch.isupper() for ch in cased):
        return word.upper()
    if template[:1].isupper():
        return word[:1].upper() + word[1:]
    return word
