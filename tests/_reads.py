"""What someone who holds a set of files can read in them, in every form a value may take there.

A search of raw bytes misses a value that a file keeps base64-encoded (the stores' payloads), in
a zip archive (``.npz``), as UTF-16/UTF-32 text (numpy string arrays) or as hex (a key file, a
digest column). :func:`holder_reads` returns all of those forms of the files at once, so one
``needle in blob`` test covers them.
"""

from __future__ import annotations

import base64
import binascii
import re
import zipfile
from pathlib import Path

_B64_RUN = re.compile(rb"[A-Za-z0-9+/_-]{16,}={0,2}")
_HEX_RUN = re.compile(rb"(?:[0-9a-fA-F]{2}){8,}")


def decoded_runs(data: bytes) -> list[bytes]:
    """Every base64 (standard or URL-safe) and hex run in ``data``, decoded (base64 at each of
    the four alignments, since a value may start anywhere inside a longer encoded blob)."""
    out = []
    for m in _B64_RUN.finditer(data):
        run = m.group().rstrip(b"=").replace(b"-", b"+").replace(b"_", b"/")
        for start in range(4):
            part = run[start:]
            part = part[: len(part) - len(part) % 4]
            if part:
                out.append(base64.b64decode(part))
    for m in _HEX_RUN.finditer(data):
        for start in (0, 1):
            part = m.group()[start:]
            with_even = part[: len(part) - len(part) % 2]
            try:
                out.append(binascii.unhexlify(with_even))
            except binascii.Error:
                pass
    return out


def holder_reads(*paths: Path, skip: tuple[Path, ...] = ()) -> bytes:
    """The files under ``paths`` as their holder reads them: raw, zip members, text re-read
    from UTF-16/UTF-32, and every base64 and hex run of all that decoded; ``skip`` files are
    left out (the key file itself)."""
    skipped = {p.resolve() for p in skip}
    raw: list[bytes] = []
    for path in paths:
        files = sorted(q for q in path.rglob("*") if q.is_file()) if path.is_dir() else [path]
        for q in files:
            if not q.exists() or q.resolve() in skipped:
                continue
            raw.append(q.read_bytes())
            if zipfile.is_zipfile(q):
                with zipfile.ZipFile(q) as z:
                    raw.extend(z.read(n) for n in z.namelist())
    texts = list(raw)
    for data in raw:
        for enc in ("utf-16-le", "utf-32-le"):
            texts.append(data.decode(enc, errors="ignore").encode("utf-8", errors="ignore"))
    return b"\n".join(texts + [d for data in texts for d in decoded_runs(data)])
