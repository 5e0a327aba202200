"""Backends by URL scheme: the registry, entry points, and what a missing driver says."""

from __future__ import annotations

from importlib.metadata import EntryPoint
from pathlib import Path

import pytest

from caveman_batch import store as store_module
from caveman_batch.errors import BackendUnavailableError, StoreURLError
from caveman_batch.memory_store import MemoryStore
from caveman_batch.store import ENTRY_POINT_GROUP, backend_schemes, open_store, register_backend


@pytest.fixture(autouse=True)
def _restore_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(store_module, "_BACKENDS", dict(store_module._BACKENDS))


def test_builtins_are_lazy_module_attr_strings() -> None:
    assert store_module._BACKENDS["lmdb"] == "backends.lmdb_store:LmdbStore"
    assert store_module._BACKENDS["sqlite"] == "backends.sqlite_store:SqliteStore"
    assert {"lmdb", "sqlite", "memory"} <= set(backend_schemes())


def test_register_backend_by_name() -> None:
    register_backend("scratch", "caveman_batch.memory_store:MemoryStore")
    with open_store("scratch://anything") as s:
        assert isinstance(s, MemoryStore)
    with pytest.raises(ValueError):
        register_backend("broken", "no_colon_here")


def test_entry_point_backend_is_found(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = EntryPoint("plugged", "caveman_batch.memory_store:MemoryStore", ENTRY_POINT_GROUP)
    monkeypatch.setattr(store_module, "entry_points",
                        lambda group: [fake] if group == ENTRY_POINT_GROUP else [])
    with open_store("plugged://") as s:
        assert isinstance(s, MemoryStore)


def test_missing_driver_names_the_install_command() -> None:
    register_backend("lmdb", "not_installed_driver_xyz:Store")
    with pytest.raises(BackendUnavailableError) as exc:
        open_store("lmdb:///tmp/nowhere")
    assert "pip install" in str(exc.value) and isinstance(exc.value, ImportError)
    assert exc.value.exit_code == 1


def test_unknown_scheme_lists_the_known_ones() -> None:
    with pytest.raises(StoreURLError) as exc:
        open_store("nosuch://x")
    assert "lmdb://" in str(exc.value) and "sqlite://" in str(exc.value)


def test_bare_path_means_lmdb(tmp_path: pytest.TempPathFactory) -> None:
    with open_store(str(tmp_path) + "/plain") as s:
        assert str(s).startswith("lmdb://")


@pytest.mark.parametrize("url", ["", "  ", "sqlite:///x.db?mode=ro", "lmdb:///p#x", "memory://?a",
                                 "sqlite:///x.db#"])
def test_empty_urls_and_urls_with_a_query_or_fragment_are_refused(url: str) -> None:
    with pytest.raises(StoreURLError) as exc:
        open_store(url)
    assert repr(url) in str(exc.value)


@pytest.mark.parametrize("url", ["sqlite:/srv/ccr.db", "sqlite:ccr.db", "LMDB:/var/ccr",
                                 "postgresql:db/ccr", "memory:"])
def test_a_url_missing_its_slashes_is_refused_not_made_a_folder(
        url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`sqlite:/x.db` was an LMDB store made in a folder `sqlite:` of the current one."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(StoreURLError) as exc:
        open_store(url)
    assert repr(url) in str(exc.value) and "lacks the //" in str(exc.value)
    assert list(tmp_path.iterdir()) == []
    with open_store(f"./{url}") as s:  # a folder so named, spelled as a path
        assert str(s).startswith("lmdb://")


def test_a_bare_path_may_hold_any_character(tmp_path: pytest.TempPathFactory) -> None:
    with open_store(f"{tmp_path}/odd?name#1") as s:
        assert str(s) == f"lmdb://{tmp_path}/odd?name#1"


def test_canonical_url_is_what_the_store_prints(tmp_path: pytest.TempPathFactory) -> None:
    for url in (f"sqlite://{tmp_path}/a/../c.db", f"lmdb://{tmp_path}/l", str(tmp_path) + "/bare"):
        expected = store_module.canonical_url(url)
        with open_store(url) as s:
            assert str(s) == expected
