"""Import helpers for optional dependencies: a missing extra names the extra to install."""

from __future__ import annotations

import importlib
from types import ModuleType

__all__ = ["require"]


def require(module: str, extra: str, *, purpose: str = "") -> ModuleType:
    """Import ``module`` or raise an ImportError naming the privembed extra that provides it.

    Examples
    --------
    >>> require("no_such_module_xyz", "text")
    Traceback (most recent call last):
    ...
    ImportError: no_such_module_xyz is required but not installed; install it with: pip install 'privembed[text]'
    """
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        what = f" for {purpose}" if purpose else ""
        raise ImportError(
            f"{module} is required{what} but not installed; "
            f"install it with: pip install 'privembed[{extra}]'"
        ) from exc
