"""Every backend passes the same contract (caveman_batch.testing.store_contract)."""

from __future__ import annotations

from pathlib import Path

import pytest

from caveman_batch.testing.store_contract import StoreContract


class TestMemoryStore(StoreContract):
    persistent = False

    @pytest.fixture
    def store_url(self) -> str:
        return "memory://"


class TestLmdbStore(StoreContract):
    @pytest.fixture
    def store_url(self, tmp_path: Path) -> str:
        return f"lmdb://{tmp_path}/ccr.lmdb"


class TestSqliteStore(StoreContract):
    @pytest.fixture
    def store_url(self, tmp_path: Path) -> str:
        return f"sqlite://{tmp_path}/ccr.db"
