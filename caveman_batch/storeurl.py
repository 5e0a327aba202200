"""The store URL of a command-line run: --store, else the environment. Part of the CLI
layer (which alone reads the environment), below both `cli` and `payload.cli`, which take
it from here; the library is handed the URL."""

from __future__ import annotations

import os
from pathlib import Path

from .errors import StoreURLError, UsageError
from .store import canonical_url, split_store_url


def default_store_url() -> str:
    """$CAVEMAN_CCR_STORE, else lmdb://$CAVEMAN_HOME/ccr.lmdb (CAVEMAN_HOME: ~/.caveman)."""
    url = os.environ.get("CAVEMAN_CCR_STORE", "").strip()
    if url:
        return url
    home = os.environ.get("CAVEMAN_HOME", "").strip() or "~/.caveman"
    return f"lmdb://{Path(os.path.expanduser(home)).absolute() / 'ccr.lmdb'}"


def store_url(url: str | None) -> str:
    """--store as given (an empty one is refused as such, never the default), else the
    default; checked before anything is opened or read."""
    chosen = default_store_url() if url is None else url
    try:
        canonical_url(chosen)  # (the scheme known, and what its backend refuses in a URL)
    except StoreURLError as exc:  # (one from the environment: named as such, not as a URL given)
        if url is None and os.environ.get("CAVEMAN_CCR_STORE", "").strip():
            raise StoreURLError(f"CAVEMAN_CCR_STORE: {exc}") from None
        raise
    return chosen


#: memory:// for a command that hands out handles: only when asked for, as tests do
ALLOW_MEMORY_ENV = "CAVEMAN_ALLOW_MEMORY_STORE"


def minting_store_url(url: str | None) -> str:
    """The store URL for a command that hands out handles (compress, shrink, payload
    compress, proxy): not memory://, whose records end with this process, so that every
    handle named could never be recovered; unless $CAVEMAN_ALLOW_MEMORY_STORE is 1."""
    chosen = store_url(url)
    if split_store_url(chosen)[0] == "memory" and os.environ.get(ALLOW_MEMORY_ENV, "").strip() != "1":
        given = f"--store {chosen}" if url is not None else f"CAVEMAN_CCR_STORE={chosen}"
        raise UsageError(f"{given}: a memory:// store ends with this process, so no "
                         f"handle this command names could ever be recovered; use lmdb:// or "
                         f"sqlite:// ({ALLOW_MEMORY_ENV}=1 allows it, for tests)")
    return chosen
