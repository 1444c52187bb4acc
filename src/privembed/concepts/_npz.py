"""The ``.npz`` archives the concept tools write: named arrays and a JSON ``metadata`` entry."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from ..data.io import atomic_output

__all__ = ["read_metadata", "write_npz"]


def write_npz(path: Path, metadata: dict[str, Any], arrays: dict[str, Any]) -> Path:
    """Write ``arrays`` (those that are None left out) and ``metadata`` (as JSON) atomically to
    ``path``, under that exact name (through a file handle: no ``.npz`` is appended)."""
    out = {k: v for k, v in arrays.items() if v is not None}
    out["metadata"] = np.array(json.dumps(metadata))
    with atomic_output(path) as tmp, tmp.open("wb") as fh:
        np.savez(fh, **out)
    return path


def read_metadata(z: Any) -> Any:
    """The JSON ``metadata`` entry of an open archive (``{}`` where it has none)."""
    return json.loads(str(z["metadata"])) if "metadata" in z.files else {}
