"""The decoder of :class:`~privembed.attacks.transformer_inversion.TransformerInversionAttack`:
its pieces (a tokenizer and the compact vocabulary the attack builds) and its network (a causal
transformer over a soft prefix, hypothesis tokens and the text, with a key/value cache for
decoding). torch is imported lazily: the network classes are made by :func:`_network`.

Examples
--------
>>> v = _Vocab.build([["a", "b", "a"], ["a"]], min_count=2, max_size=None)
>>> v.pieces[len(_SPECIALS):], v.ids(["a", "b"], max_len=5) == [5, UNK]
(['a'], True)
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..core._validation import DataError, check_choice
from ._common import by_frequency, decoded

__all__ = ["BOS", "EOS", "PAD", "SEP", "UNK", "PieceTokenizer", "minilm_tokenizer"]


PAD, BOS, EOS, UNK, SEP = 0, 1, 2, 3, 4
_SPECIALS = ("<pad>", "<bos>", "<eos>", "<unk>", "<sep>")
_WORDS = re.compile(r"\w+|[^\w\s]")


# ---------------------------------------------------------------------------------------------
# tokenisers: text <-> pieces; the attack builds its own compact vocabulary of pieces
# ---------------------------------------------------------------------------------------------


class PieceTokenizer:
    """Splits text into pieces and joins pieces back: ``"word"`` or ``"wordpiece"``.

    ``"word"``: lower-cased words and punctuation marks (no dependency). ``"wordpiece"``: the
    uncased WordPiece tokenizer of all-MiniLM-L6-v2 from the offline model (``tokenizers``,
    extra ``embed``); a piece that continues a word starts with ``##``.

    Examples
    --------
    >>> tok = PieceTokenizer("word")
    >>> tok.split("Seen on Monday, in Paris."), tok.join(["seen", "on", "monday", ",", "in"])
    (['seen', 'on', 'monday', ',', 'in', 'paris', '.'], 'seen on monday, in')
    >>> PieceTokenizer("wordpiece").join(["the", "hyper", "##tension", "."])
    'the hypertension.'
    """

    KINDS = ("word", "wordpiece")

    def __init__(self, kind: str = "wordpiece") -> None:
        self.kind = check_choice("tokenizer", kind, self.KINDS)
        self._tok: Any = None

    def _wordpiece(self) -> Any:
        if self._tok is None:
            self._tok = minilm_tokenizer()
        return self._tok

    def split(self, text: str) -> list[str]:
        if not isinstance(text, str):
            raise TypeError(f"text must be a str, got {type(text).__name__}.")
        if self.kind == "word":
            return _WORDS.findall(text.lower())
        return list(self._wordpiece().encode(text, add_special_tokens=False).tokens)

    def split_many(self, texts: Sequence[str]) -> list[list[str]]:
        if self.kind == "word":
            return [self.split(t) for t in texts]
        for i, t in enumerate(texts):
            if not isinstance(t, str):
                raise TypeError(f"texts[{i}] must be a str, got {type(t).__name__}.")
        enc = self._wordpiece().encode_batch(list(texts), add_special_tokens=False)
        return [list(e.tokens) for e in enc]

    @staticmethod
    def join(pieces: Sequence[str]) -> str:
        out = ""
        for p in pieces:
            if p.startswith("##"):
                out += p[2:]
            elif out and re.match(r"\w", p):
                out += " " + p
            else:
                out += p
        return out


def minilm_tokenizer() -> Any:
    """The WordPiece tokenizer (``tokenizers.Tokenizer``) of the offline all-MiniLM-L6-v2."""
    from ..core._optional import require
    from ..data.embedders import resolve_model

    tk = require("tokenizers", "embed", purpose="the WordPiece tokenizer of the inversion attack")
    _, target, local = resolve_model(None)
    path = Path(target) / "tokenizer.json"
    if not local or not path.is_file():
        raise FileNotFoundError(f"no tokenizer.json in the offline model folder {target}.")
    tok = tk.Tokenizer.from_file(str(path))
    tok.no_truncation()
    tok.no_padding()
    return tok


class _Vocab:
    def __init__(self, pieces: Sequence[str]) -> None:
        self.pieces = list(pieces)
        if tuple(self.pieces[: len(_SPECIALS)]) != _SPECIALS:
            raise DataError(f"a vocabulary must start with {_SPECIALS}.")
        self.index = {p: i for i, p in enumerate(self.pieces)}

    def __len__(self) -> int:
        return len(self.pieces)

    @classmethod
    def build(
        cls, sentences: Sequence[Sequence[str]], min_count: int, max_size: int | None
    ) -> _Vocab:
        limit = None if max_size is None else max(0, max_size - len(_SPECIALS))
        pieces = by_frequency(sentences, min_count=min_count, limit=limit, skip=_SPECIALS)
        return cls([*_SPECIALS, *pieces])

    def ids(self, pieces: Sequence[str], max_len: int) -> list[int]:
        return [self.index.get(p, UNK) for p in pieces[:max_len]]

    def pieces_of(self, ids: Sequence[int]) -> list[str]:
        return decoded(ids, self.pieces, end=EOS, silent=(PAD, BOS, SEP))


# ---------------------------------------------------------------------------------------------
# the network
# ---------------------------------------------------------------------------------------------


def _block(torch: Any) -> Any:
    """The transformer block class of :func:`_network` (made here: torch is imported lazily)."""
    nn = torch.nn
    F = torch.nn.functional

    class Block(nn.Module):  # type: ignore[name-defined]
        """Pre-norm transformer block whose attention can extend a key/value cache."""

        def __init__(self, d: int, heads: int, dropout: float) -> None:
            super().__init__()
            self.heads = heads
            self.n1, self.n2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.qkv = nn.Linear(d, 3 * d)
            self.proj = nn.Linear(d, d)
            self.ff = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))
            self.drop = nn.Dropout(dropout)

        def forward(self, x: Any, mask: Any, cache: list[Any] | None) -> Any:
            B, L, D = x.shape
            h = self.heads
            q, k, v = self.qkv(self.n1(x)).split(D, dim=-1)
            q, k, v = (t.view(B, L, h, D // h).transpose(1, 2) for t in (q, k, v))
            if cache is not None:
                if cache:
                    k = torch.cat([cache[0], k], 2)
                    v = torch.cat([cache[1], v], 2)
                cache[:] = [k, v]
            a = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
            x = x + self.drop(self.proj(a.transpose(1, 2).reshape(B, L, D)))
            return x + self.drop(self.ff(self.n2(x)))

    return Block


def _network(torch: Any) -> Any:
    """The decoder class (a ``torch.nn.Module``): soft prefix, hypothesis tokens, text."""
    nn = torch.nn
    Block = _block(torch)

    class PrefixDecoder(nn.Module):  # type: ignore[name-defined]
        """Causal transformer over [soft prefix | hypothesis tokens | <bos> text <eos>]."""

        def __init__(
            self, d_in: int, vocab: int, d_model: int, layers: int, heads: int, prefix: int,
            max_positions: int, dropout: float,
        ) -> None:  # fmt: skip
            super().__init__()
            self.prefix, self.d_model = prefix, d_model

            def mlp() -> Any:
                return nn.Sequential(
                    nn.Linear(d_in, d_model * 2),
                    nn.GELU(),
                    nn.Linear(d_model * 2, prefix * d_model),
                )

            self.cond = nn.ModuleList([mlp(), mlp(), mlp()])  # target, hypothesis, difference
            self.tok = nn.Embedding(vocab, d_model, padding_idx=PAD)
            self.pos = nn.Embedding(max_positions, d_model)
            self.seg = nn.Embedding(3, d_model)  # prefix, hypothesis, text
            self.blocks = nn.ModuleList([Block(d_model, heads, dropout) for _ in range(layers)])
            self.norm = nn.LayerNorm(d_model)
            self.out = nn.Linear(d_model, vocab, bias=False)
            self.out.weight = self.tok.weight  # tied input and output embeddings
            for emb in (self.tok, self.pos, self.seg):  # small logits at the start (GPT-2's 0.02)
                nn.init.normal_(emb.weight, std=0.02)

        def _context(self, conds: list[Any], hyp: Any | None) -> tuple[Any, Any, Any]:
            B = conds[0].shape[0]
            parts = [
                self.cond[k](c).view(B, self.prefix, self.d_model) for k, c in enumerate(conds)
            ]
            pre = torch.cat(parts, 1)
            dev = pre.device
            segs = [torch.zeros(pre.shape[1], dtype=torch.long, device=dev)]
            keep = [torch.ones(B, pre.shape[1], dtype=torch.bool, device=dev)]
            seq = [pre]
            if hyp is not None:
                seq.append(self.tok(hyp))
                segs.append(torch.ones(hyp.shape[1], dtype=torch.long, device=dev))
                keep.append(hyp != PAD)
            return torch.cat(seq, 1), torch.cat(segs), torch.cat(keep, 1)

        def _run(self, x: Any, segs: Any, offset: int, mask: Any, caches: Any) -> Any:
            L = x.shape[1]
            pos = torch.arange(offset, offset + L, device=x.device)
            x = x + self.pos(pos)[None] + self.seg(segs)[None]
            for b, blk in enumerate(self.blocks):
                x = blk(x, mask, None if caches is None else caches[b])
            return self.out(self.norm(x))

        def forward(self, conds: list[Any], hyp: Any | None, text: Any) -> Any:
            """Logits at the text positions (teacher forcing); ``conds``: 1 or 3 (B, d_in)."""
            x, segs, _, mask = _with_text(torch, *self._context(conds, hyp), self.tok(text), text)
            return self._run(x, segs, 0, mask, None)[:, x.shape[1] - text.shape[1] :]

        def start(self, conds: list[Any], hyp: Any | None, bos: Any) -> tuple[Any, Any]:
            """Decoding: run the context and ``<bos>``; returns (last logits, state)."""
            x, segs, keep, mask = _with_text(torch, *self._context(conds, hyp), self.tok(bos), bos)
            caches: list[list[Any]] = [[] for _ in self.blocks]
            logits = self._run(x, segs, 0, mask, caches)
            return logits[:, -1], (caches, keep, x.shape[1])

        def step(self, tok: Any, state: Any) -> tuple[Any, Any]:
            """One more token for every row (cached keys and values); returns (logits, state)."""
            caches, keep, L = state
            dev = tok.device
            keep = torch.cat([keep, torch.ones(tok.shape[0], 1, dtype=torch.bool, device=dev)], 1)
            segs = torch.full((1,), 2, dtype=torch.long, device=dev)
            logits = self._run(self.tok(tok[:, None]), segs, L, keep[:, None, None, :], caches)
            return logits[:, -1], (caches, keep, L + 1)

    return PrefixDecoder


def _with_text(
    torch: Any, ctx: Any, segs: Any, keep: Any, embedded: Any, text: Any
) -> tuple[Any, Any, Any, Any]:
    """The context followed by the text: inputs, segments, kept positions, causal mask."""
    x = torch.cat([ctx, embedded], 1)
    dev = x.device
    segs = torch.cat([segs, torch.full((text.shape[1],), 2, dtype=torch.long, device=dev)])
    keep = torch.cat([keep, torch.ones_like(text, dtype=torch.bool)], 1)
    L = x.shape[1]
    causal = torch.ones(L, L, dtype=torch.bool, device=dev).tril()
    return x, segs, keep, causal[None, None] & keep[:, None, None, :]
