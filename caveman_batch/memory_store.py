"""`memory://`: an in-process store for tests and one-shot runs (nothing persists)."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from typing import Any

from .errors import StoreError
from .store import DELETE, Merge, Store, apply_commit


class MemoryStore(Store):
    scheme = "memory"

    def __init__(self, readonly: bool = False) -> None:
        self._data: dict[bytes, bytes] | None = {}
        self._lock = threading.Lock()
        self._readonly = readonly

    @classmethod
    def open(cls, location: str, create: bool = True, readonly: bool = False) -> MemoryStore:
        return cls(readonly)

    @property
    def url(self) -> str:
        return "memory://"

    def _live(self) -> dict[bytes, bytes]:
        if self._data is None:
            raise StoreError("memory:// store is closed")
        return self._data

    def commit(self, items: Sequence[tuple[bytes, bytes]], merge: Merge | None = None) -> None:
        if self._readonly:
            raise StoreError("memory:// is open read-only")
        with self._lock:
            data = self._live()
            staged: dict[bytes, Any] = {}

            def read(key: bytes) -> bytes | None:
                old = staged[key] if key in staged else data.get(key)
                return None if old is DELETE else old

            apply_commit(items, merge, read, staged.__setitem__,
                         lambda key: staged.__setitem__(key, DELETE))
            for key, result in staged.items():  # all or nothing: merge may raise above
                if result is DELETE:
                    data.pop(key, None)
                else:
                    data[key] = result

    def get(self, key: bytes) -> bytes | None:
        return self._live().get(key)

    def keys(self, prefix: bytes = b"") -> Iterator[bytes]:
        with self._lock:
            found = sorted(k for k in self._live() if k.startswith(prefix))
        yield from found

    def close(self) -> None:
        self._data = None
