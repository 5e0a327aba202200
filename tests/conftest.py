from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

CORPORA = Path(__file__).resolve().parents[2] / "shared" / "corpora"


@pytest.fixture(autouse=True)
def _isolated_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Keep the developer's CAVEMAN_* settings and ~/.caveman out of every test.

    CAVEMAN_PURE_PYTHON stays: it is how a run of the suite (CI's second pass) asks for the
    pure-Python path in this process and in every subprocess a test starts."""
    for name in list(os.environ):
        if name.startswith("CAVEMAN_") and name != "CAVEMAN_PURE_PYTHON":
            monkeypatch.delenv(name)
    monkeypatch.setenv("CAVEMAN_HOME", str(tmp_path / "caveman-home"))
    yield


@pytest.fixture
def corpora() -> Path:
    if not CORPORA.is_dir():
        if os.environ.get("CI"):  # CI lays them beside the clone: absent there is a failure
            pytest.fail(f"CI: shared corpora not present at {CORPORA}")
        pytest.skip(f"shared corpora not present at {CORPORA}")
    return CORPORA
