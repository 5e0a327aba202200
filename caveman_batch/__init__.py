"""caveman-batch: bulk, reversible compression of LLM tool catalogs."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

if TYPE_CHECKING:
    from .errors import CavemanError
    from .store import Store, open_store

__all__ = ["CavemanError", "Store", "__version__", "open_store"]
# where each exported name lives: loaded on first use, so that importing the package (as
# the console script does before the CLI's imports, see _entry) costs nothing
_LAZY = {"CavemanError": "errors", "Store": "store", "open_store": "store"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        value = getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
