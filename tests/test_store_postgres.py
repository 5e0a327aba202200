"""The postgresql:// store: the shared contract, its URL, and what a fleet does to it
(hosts committing at once, a dropped connection, a read-only role)."""

from __future__ import annotations

import sys
import threading

import pytest

from caveman_batch import ccr
from caveman_batch.errors import (
    BackendUnavailableError,
    ForeignStoreError,
    StoreError,
    StoreNotFoundError,
    StoreURLError,
)
from caveman_batch.store import canonical_url, open_store, split_store_url
from caveman_batch.testing.store_contract import StoreContract


class TestPostgresStore(StoreContract):
    @pytest.fixture
    def store_url(self, postgres_url: str) -> str:
        return postgres_url
