"""Type stub for the C extension caveman_batch._fastmean (source: _fastmean.c)."""

from typing import Any

def mean_rows(table: Any, texts: list[list[str]], ids_of: dict[str, bytes], out: Any,
              /) -> bool | None:
    """out[i] = the mean of text i's token rows of table (float32, C-contiguous; zero where
    a text has no token): embedding.WordLlamaEmbedder's loop, exactly. None if the input is
    not what it handles (then out holds nothing to keep)."""
