"""caveman-batch: bulk, reversible compression of LLM tool catalogs."""

from __future__ import annotations

__version__ = "0.1.0"

from .errors import CavemanError
from .store import Store, open_store

__all__ = ["CavemanError", "Store", "__version__", "open_store"]
