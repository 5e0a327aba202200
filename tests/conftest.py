from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

CORPORA = Path(__file__).resolve().parents[2] / "shared" / "corpora"


@pytest.fixture(autouse=True)
def _isolated_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Keep the developer's CAVEMAN_* settings and ~/.caveman out of every test."""
    for name in list(os.environ):
        if name.startswith("CAVEMAN_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("CAVEMAN_HOME", str(tmp_path / "caveman-home"))
    yield


@pytest.fixture
def corpora() -> Path:
    if not CORPORA.is_dir():
        pytest.skip(f"shared corpora not present at {CORPORA}")
    return CORPORA
