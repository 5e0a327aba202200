"""The contract every store backend passes.

Subclass `StoreContract` in a test module and provide a `store_url` fixture:

    class TestMyStore(StoreContract):
        @pytest.fixture
        def store_url(self, tmp_path):
            return f"mystore://{tmp_path}/db"

`persistent = False` skips the checks that need data to survive a reopen.
"""

from __future__ import annotations

import contextlib
import pickle
import struct
import tracemalloc
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from caveman_batch import ccr
from caveman_batch.errors import (
    AmbiguousHandleError,
    IntegrityError,
    InvalidHandleError,
    StoreError,
    StoreNotFoundError,
    UnknownHandleError,
)
from caveman_batch.store import DELETE, Store, open_store

#: Originals that break naive text handling; each must come back byte for byte.
ROUND_TRIP_FIXTURES: dict[str, bytes] = {
    "empty": b"",
    "crlf": b'{"a":1}\r\n{"b":2}\r\n',
    "lone_cr": b"line one\rline two\r",
    "no_trailing_newline": b'{"tools":[]}',
    "nul": b"before\x00after\x00",
    "bom": b'\xef\xbb\xbf{"tools":[]}\n',
    "utf8_4byte": "emoji 😀 and 𝄞 clef\n".encode(),
    "invalid_utf8": b"\xff\xfe\xc3\x28 broken \xa0\xa1",
}


class StoreContract:
    persistent = True

    @pytest.fixture
    def store_url(self) -> str:  # pragma: no cover - overridden
        raise NotImplementedError

    @pytest.fixture
    def store(self, store_url: str) -> Iterator[Store]:
        with open_store(store_url) as s:
            yield s

    # -- raw key/value layer -----------------------------------------------

    def test_get_missing_is_none(self, store: Store) -> None:
        assert store.get(b"nope") is None
        assert b"nope" not in store

    def test_put_get(self, store: Store) -> None:
        store.put(b"k1", b"v1")
        assert store.get(b"k1") == b"v1"
        assert b"k1" in store

    def test_overwrite(self, store: Store) -> None:
        store.put(b"k", b"one")
        store.put(b"k", b"two")
        assert store.get(b"k") == b"two"

    def test_commit_many_in_one_call(self, store: Store) -> None:
        store.commit([(b"a%03d" % i, b"x" * i) for i in range(200)])
        assert [store.get(b"a%03d" % i) for i in (0, 7, 199)] == [b"", b"x" * 7, b"x" * 199]

    def test_keys_by_prefix_sorted(self, store: Store) -> None:
        store.commit([(b"ab2", b""), (b"ab1", b""), (b"ac", b""), (b"b", b""), (b"a", b"")])
        assert list(store.keys(b"ab")) == [b"ab1", b"ab2"]
        assert list(store.keys()) == [b"a", b"ab1", b"ab2", b"ac", b"b"]
        assert list(store.keys(b"zz")) == []

    def test_keys_beyond_one_read_chunk(self, store: Store) -> None:
        keys = [b"%05d" % i for i in range(2500)]
        store.commit([(k, b"") for k in keys])
        assert list(store.keys()) == keys

    def test_delete(self, store: Store) -> None:
        store.commit([(b"a", b"1"), (b"b", b"2")])
        store.delete([b"a", b"missing"])
        assert store.get(b"a") is None and store.get(b"b") == b"2"

    def test_merge_sees_old_value_and_can_keep_or_delete(self, store: Store) -> None:
        store.commit([(b"keep", b"old"), (b"drop", b"old")])
        seen: dict[bytes, bytes | None] = {}

        def merge(key: bytes, old: bytes | None, new: bytes) -> object:
            seen[key] = old
            return {b"keep": None, b"drop": DELETE}.get(key, new)

        store.commit([(b"keep", b"new"), (b"drop", b"new"), (b"fresh", b"new")], merge=merge)  # type: ignore[arg-type]
        assert seen == {b"keep": b"old", b"drop": b"old", b"fresh": None}
        assert store.get(b"keep") == b"old"
        assert store.get(b"drop") is None
        assert store.get(b"fresh") == b"new"

    def test_commit_is_all_or_nothing(self, store: Store) -> None:
        def explode(key: bytes, old: bytes | None, new: bytes) -> bytes:
            if key == b"k3":
                raise RuntimeError("boom")
            return new

        with pytest.raises(RuntimeError):
            store.commit([(b"k1", b"1"), (b"k2", b"2"), (b"k3", b"3")], merge=explode)
        assert list(store.keys()) == []

    def test_str_is_url_and_reopens(self, store: Store, store_url: str) -> None:
        store.put(b"k", b"v")
        assert str(store).split("://")[0] == store_url.split("://")[0]
        if self.persistent:
            with open_store(str(store)) as again:
                assert again.get(b"k") == b"v"

    def test_pickles_as_its_url(self, store: Store) -> None:
        store.put(b"k", b"v")
        clone = pickle.loads(pickle.dumps(store))
        try:
            assert str(clone) == str(store)
            if self.persistent:
                assert clone.get(b"k") == b"v"
        finally:
            clone.close()

    def test_persists_across_close(self, store_url: str) -> None:
        if not self.persistent:
            pytest.skip("not a persistent backend")
        with open_store(store_url) as s:
            s.put(b"k", b"v")
        with open_store(store_url) as s:
            assert s.get(b"k") == b"v"

    def test_open_without_create_refuses_a_missing_store(self, store_url: str) -> None:
        if not self.persistent:
            pytest.skip("not a persistent backend")
        with pytest.raises(StoreNotFoundError) as exc:
            open_store(store_url, create=False)
        assert store_url.split("://", 1)[1].rstrip("/") in str(exc.value)
        with open_store(store_url) as s:  # create=True (the default) makes it
            s.put(b"k", b"v")
        with open_store(store_url, create=False) as s:
            assert s.get(b"k") == b"v"

    def test_readonly_open_reads_and_writes_nothing(self, store_url: str) -> None:
        if self.persistent:
            with pytest.raises(StoreNotFoundError):  # read-only never creates
                open_store(store_url, readonly=True)
        with open_store(store_url) as s:
            handle = ccr.store_original(s, b"read me")
        with open_store(store_url, readonly=True) as ro:
            if self.persistent:
                assert ccr.recover(ro, handle) == b"read me"
            with pytest.raises(StoreError):
                ro.put(b"k", b"v")
            with pytest.raises(StoreError):
                ccr.store_original(ro, b"another")
        if self.persistent:
            with open_store(store_url) as s:
                assert list(s.keys()) == [handle[4:].encode()]

    def test_closed_store_refuses_use(self, store_url: str) -> None:
        s = open_store(store_url)
        s.close()
        s.close()  # twice is harmless
        with pytest.raises(StoreError):
            s.get(b"k")
        with pytest.raises(StoreError):
            s.put(b"k", b"v")

    # -- CCR on top of the store -------------------------------------------

    @pytest.mark.parametrize("name", sorted(ROUND_TRIP_FIXTURES))
    def test_ccr_round_trip_fixtures(self, store: Store, name: str) -> None:
        original = ROUND_TRIP_FIXTURES[name]
        handle = ccr.store_original(store, original)
        assert handle == "ccr_" + ccr.digest_of(original)
        assert ccr.recover(store, handle) == original

    def test_ccr_round_trip_32_mib(self, store: Store) -> None:
        original = bytes(range(256)) * (32 * 1024 * 4)
        assert len(original) == 32 << 20
        handle = ccr.store_original(store, original)
        assert ccr.recover(store, handle) == original
        report = ccr.audit(store)  # verified in chunks, past 1 MiB
        assert (report.verified, report.original_bytes) == (1, len(original))

    @settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
    @given(original=st.binary(max_size=4096))
    def test_ccr_round_trip_any_bytes(self, store: Store, original: bytes) -> None:
        assert ccr.recover(store, ccr.store_original(store, original)) == original

    def test_handle_forms_and_unique_prefix(self, store: Store) -> None:
        handle = ccr.store_original(store, b"hello")
        digest = handle[4:]
        for form in (handle, "ccr://" + digest, digest, "ccr_" + digest[:8], digest.upper()):
            assert ccr.recover(store, form) == b"hello"

    def test_ambiguous_prefix(self, store: Store) -> None:
        # resolution looks at keys only: two keys sharing 10 hex digits suffice
        store.commit([(b"abcdef0123" + b"0" * 54, b""), (b"abcdef0123" + b"1" * 54, b"")])
        with pytest.raises(AmbiguousHandleError) as exc:
            ccr.resolve(store, "ccr_abcdef0123")
        assert "ambiguous" in str(exc.value) and len(exc.value.matches) == 2
        assert ccr.resolve(store, "ccr_abcdef01230") == "abcdef0123" + "0" * 54

    def test_unknown_handle_is_keyerror(self, store: Store) -> None:
        with pytest.raises(UnknownHandleError) as exc:
            ccr.recover(store, "ccr_" + "0" * 64)
        assert isinstance(exc.value, KeyError)
        assert "ccr_" + "0" * 64 in str(exc.value)

    @pytest.mark.parametrize("bad", ["../etc", "0" * 65, "xyz12345", "0" * 7, "", "ccr_", "ccr_../../x"])
    def test_malformed_handles_refused_before_store_access(self, bad: str) -> None:
        class Untouchable(Store):
            scheme = "untouchable"

            @classmethod
            def open(cls, location: str, create: bool = True, readonly: bool = False) -> Store:
                return cls()

            @property
            def url(self) -> str:
                return "untouchable://"

            def commit(self, items, merge=None):  # type: ignore[no-untyped-def]
                raise AssertionError("store touched")

            def get(self, key):  # type: ignore[no-untyped-def]
                raise AssertionError("store touched")

            def keys(self, prefix=b""):  # type: ignore[no-untyped-def]
                raise AssertionError("store touched")

            def close(self) -> None:
                pass

        with pytest.raises(InvalidHandleError):
            ccr.recover(Untouchable(), bad)

    def test_tampered_record_refused_then_healed(self, store: Store) -> None:
        original = b'{"tools":[{"name":"x","description":"y"}]}' * 20
        handle = ccr.store_original(store, original)
        key = handle[4:].encode()
        value = bytearray(store.get(key) or b"")
        value[-3] ^= 0xFF
        store.put(key, bytes(value))
        with pytest.raises(IntegrityError):
            ccr.recover(store, handle)
        report = ccr.audit(store)
        assert report.verified == 0 and sum(report.excluded.values()) == 1
        assert ccr.store_original(store, original) == handle  # commit again heals it
        assert ccr.recover(store, handle) == original

    @pytest.mark.parametrize("which", ["whole", "span"])
    def test_flipped_codec_byte_refused_then_healed(self, store: Store, which: str) -> None:
        """The same payload under the other codec (one bit of the header): refused, and a
        commit of the same record heals it (the payloads agree; the codec is what lies)."""
        catalog, tool = _catalog_with(b'{"name":"t1"}')
        span = _span(tool, catalog)
        whole = ccr.prepare(catalog)
        ccr.commit(store, [whole, span])
        record = whole if which == "whole" else span
        value = bytearray(record.value)
        value[4] = ccr.CODEC_SPAN if value[4] == ccr.CODEC_ZSTD else ccr.CODEC_ZSTD
        store.put(record.key, bytes(value))
        with pytest.raises(IntegrityError):
            ccr.recover(store, record.handle)
        ccr.commit(store, [whole, span])
        assert ccr.recover(store, record.handle) == (catalog if which == "whole" else tool)
        assert ccr.audit(store).excluded == {}

    def test_record_that_decodes_but_does_not_hash_to_its_key_refused_then_healed(
            self, store: Store) -> None:
        """Tampered so that zstd decodes it (another original of the same length under this
        key): only the sha256 check can catch it."""
        original = b'{"tools":[{"name":"x","description":"y"}]}' * 20
        forged = original.replace(b'"y"', b'"z"')
        handle = ccr.store_original(store, original)
        key = handle[4:].encode()
        store.put(key, ccr.prepare(forged).value)
        with pytest.raises(IntegrityError) as refused:
            ccr.recover(store, handle)
        assert refused.value.reason == "digest mismatch"
        report = ccr.audit(store)
        assert report.verified == 0 and report.excluded == {"digest mismatch": 1}
        assert ccr.store_original(store, original) == handle  # commit again heals it
        assert ccr.recover(store, handle) == original

    def test_truncated_record_refused(self, store: Store) -> None:
        handle = ccr.store_original(store, b"x" * 1000)
        key = handle[4:].encode()
        store.put(key, (store.get(key) or b"")[:20])
        with pytest.raises(IntegrityError):
            ccr.recover(store, handle)

    def test_recommit_refreshes_last_seen_keeps_first_stored(self, store: Store) -> None:
        ccr.commit(store, [ccr.prepare(b"abc", now_ms=1_000)])
        ccr.commit(store, [ccr.prepare(b"abc", now_ms=5_000)])
        info = ccr.info(store, "ccr_" + ccr.digest_of(b"abc"))
        assert (info.first_stored, info.last_seen) == (1.0, 5.0)

    def test_missing_names_the_absent_keys_in_order(self, store: Store) -> None:
        store.commit([(b"k1", b"v1"), (b"k3", b"v3")])
        assert store.missing([b"k0", b"k1", b"k2", b"k3", b"k4"]) == [b"k0", b"k2", b"k4"]
        assert store.missing([]) == []

    def test_commit_present_writes_only_behind_a_present_guard(self, store: Store) -> None:
        store.commit([(b"g1", b"x"), (b"k2", b"old")])
        absent = store.commit_present([(b"g1", b"k1", b"v1"), (b"g2", b"k2", b"v2"),
                                       (b"g2", b"k3", b"v3"), (b"g1", b"k2", b"v4")],
                                      merge=lambda _k, old, new: new + (old or b""))
        assert absent == [b"g2"]
        assert (store.get(b"k1"), store.get(b"k2"), store.get(b"k3")) == (b"v1", b"v4old", None)
        assert store.get(b"g1") == b"x" and store.get(b"g2") is None  # guards are never written
        assert store.commit_present([]) == []
        digest = ccr.store_original(store, b"held")[4:]
        assert ccr.touch_held(store, [digest, "f" * 64], now_ms=9 << 40) == ["f" * 64]
        assert ccr.info(store, "ccr_" + digest).last_seen == (9 << 40) / 1000
        assert store.get(ccr.SEEN_PREFIX + b"f" * 64) is None

    def test_touch_moves_last_seen_forward_only(self, store: Store) -> None:
        digest, absent = ccr.digest_of(b"abc"), ccr.digest_of(b"absent")
        ccr.commit(store, [ccr.prepare(b"abc", now_ms=1_000)])
        stored = store.get(digest.encode())
        ccr.touch(store, [digest, absent, digest], now_ms=5_000)
        info = ccr.info(store, "ccr_" + digest)
        assert (info.first_stored, info.last_seen) == (1.0, 5.0)
        assert store.get(digest.encode()) == stored  # the record itself is not rewritten
        seen = store.get(ccr.SEEN_PREFIX + digest.encode())
        ccr.touch(store, [digest], now_ms=3_000)  # never backwards
        assert store.get(ccr.SEEN_PREFIX + digest.encode()) == seen
        assert ccr.info(store, "ccr_" + digest).last_seen == 5.0
        assert ccr.recover(store, "ccr_" + digest) == b"abc"
        assert store.get(absent.encode()) is None  # touch creates nothing for an absent record
        assert store.get(ccr.SEEN_PREFIX + absent.encode()) is None
        ccr.commit(store, [ccr.prepare(b"abc", now_ms=7_000)])  # a commit again: the header's
        assert ccr.info(store, "ccr_" + digest).last_seen == 7.0
        store.put(b"f" * 64, b"CC")  # damaged: touch asks presence only, never reads the record
        ccr.touch(store, ["f" * 64], now_ms=9_000)
        assert store.get(b"f" * 64) == b"CC" and store.get(ccr.SEEN_PREFIX + b"f" * 64) is not None

    def test_seen_entries_are_not_records(self, store: Store) -> None:
        handle = ccr.store_original(store, b"abc")
        ccr.touch(store, [handle[4:]])
        store.put(ccr.SEEN_PREFIX + b"junk", b"?")  # an orphan, and not 8 bytes
        report = ccr.audit(store)
        assert (report.records, report.verified, report.excluded) == (1, 1, {})
        assert ccr.resolve(store, handle[4:12]) == handle[4:]
        with open_store("memory://") as target:  # migrated with the later time in its header
            ccr.migrate(store, target)
            assert list(target.keys()) == [handle[4:].encode()]
            assert ccr.info(target, handle).last_seen == ccr.info(store, handle).last_seen

    def test_prune_and_touch(self, store: Store) -> None:
        day = 24 * 3_600_000
        ccr.commit(store, [ccr.prepare(b"old", now_ms=1_000), ccr.prepare(b"new", now_ms=9 * day)])
        ccr.commit(store, [ccr.prepare(b"kept", now_ms=1_000), ccr.prepare(b"gone", now_ms=1_000)])
        ccr.touch(store, [ccr.digest_of(b"kept")], now_ms=9 * day)
        ccr.touch(store, [ccr.digest_of(b"gone")], now_ms=2_000)  # touched, but long ago
        # a caller that checked presence itself, with a record pruned meanwhile: an orphan entry
        ccr.touch(store, [ccr.digest_of(b"never stored")], now_ms=9 * day, present=True)
        dry = ccr.prune(store, 7 * 86_400, dry_run=True, now_ms=10 * day)
        stale = sorted("ccr_" + ccr.digest_of(b) for b in (b"old", b"gone"))
        assert sorted(r.handle for r in dry) == stale
        assert ccr.recover(store, dry[0].handle) in (b"old", b"gone")
        ccr.prune(store, 7 * 86_400, now_ms=10 * day)
        for handle in stale:
            with pytest.raises(UnknownHandleError):
                ccr.recover(store, handle)
        assert ccr.recover(store, "ccr_" + ccr.digest_of(b"kept")) == b"kept"
        assert list(store.keys(ccr.SEEN_PREFIX)) == [ccr.SEEN_PREFIX + ccr.digest_of(b"kept").encode()]

    def test_prune_keeps_a_record_touched_meanwhile(self, store: Store,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
        """Touched after prune's scan found it stale, before its delete: kept; and a ~seen
        entry whose record is gone is dropped."""
        day = 24 * 3_600_000
        ccr.commit(store, [ccr.prepare(b"busy", now_ms=1_000), ccr.prepare(b"idle", now_ms=1_000)])
        busy = ccr.digest_of(b"busy")
        store.put(ccr.SEEN_PREFIX + ccr.digest_of(b"elsewhere").encode(), b"\0" * 8)
        store.put(ccr.SEEN_PREFIX + b"\xff junk", b"")
        store.put(ccr.SEEN_PREFIX, b"")  # naming nothing at all
        scan = ccr.iter_verified

        def scan_then_touch(s: Store, audit: ccr.Audit | None = None) -> Any:
            yield from scan(s, audit)
            ccr.touch(s, [busy], now_ms=10 * day)

        monkeypatch.setattr(ccr, "iter_verified", scan_then_touch)
        dropped = ccr.prune(store, 7 * 86_400, now_ms=10 * day)
        assert [r.handle for r in dropped] == ["ccr_" + ccr.digest_of(b"idle")]  # what it removed
        assert ccr.recover(store, "ccr_" + busy) == b"busy"
        with pytest.raises(UnknownHandleError):
            ccr.recover(store, "ccr_" + ccr.digest_of(b"idle"))
        assert list(store.keys(ccr.SEEN_PREFIX)) == [ccr.SEEN_PREFIX + busy.encode()]

    def test_prune_keeps_the_seen_entry_of_a_record_committed_again_meanwhile(
            self, store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
        """A ~seen entry whose record another prune removed during this one's scan is no
        orphan once the record is committed again and refreshed before the delete: it was
        dropped whatever its time, the record fell back to its header's older time, and the
        next prune removed a record a run had just refreshed (and published)."""
        day = 24 * 3_600_000
        ccr.commit(store, [ccr.prepare(b"back", now_ms=1_000)])
        digest = ccr.digest_of(b"back")
        ccr.touch(store, [digest], now_ms=2_000)
        scan = ccr.iter_verified

        def another_prune_then_a_run(s: Store, audit: ccr.Audit | None = None) -> Any:
            s.delete([digest.encode(), ccr.SEEN_PREFIX + digest.encode()])  # (the other prune)
            yield from scan(s, audit)
            ccr.commit(s, [ccr.prepare(b"back", now_ms=4 * day)])  # a run commits it again
            ccr.touch(s, [digest], now_ms=10 * day)  # and a later one refreshes it

        monkeypatch.setattr(ccr, "iter_verified", another_prune_then_a_run)
        assert ccr.prune(store, 7 * 86_400, now_ms=10 * day) == []
        monkeypatch.setattr(ccr, "iter_verified", scan)
        assert ccr.info(store, "ccr_" + digest).last_seen == 10 * day / 1000
        assert ccr.prune(store, 7 * 86_400, now_ms=12 * day) == []
        assert ccr.recover(store, "ccr_" + digest) == b"back"

    def test_audit_totals_only_from_verified(self, store: Store) -> None:
        good = ccr.store_original(store, b"a" * 500)
        bad = ccr.store_original(store, b"b" * 500)
        store.put(bad[4:].encode(), b"garbage")
        store.put(b"not-a-digest", b"x")
        report = ccr.audit(store)
        assert report.records == 2 and report.verified == 1 and report.foreign_keys == 1
        assert report.original_bytes == 500
        assert report.excluded == {"corrupt": 1}
        assert good and sum(report.excluded.values()) == len(report.failures)

    def test_migrate_to_memory(self, store: Store) -> None:
        handles = [ccr.store_original(store, b"%d" % i) for i in range(50)]
        store.put(b"f" * 64, b"junk")
        with open_store("memory://") as target:
            report = ccr.migrate(store, target)
            assert report.verified == 50 and report.excluded == {"corrupt": 1}
            assert all(ccr.recover(target, h) == b"%d" % i for i, h in enumerate(handles))


    # -- span records: a tool of a catalog, stored as where it lies in the catalog's ----

    def test_span_record_recovers_its_bytes_from_the_record_it_lies_in(self, store: Store) -> None:
        catalog, tool = _catalog_with(b'{"name":"t1"}')
        span = _span(tool, catalog)
        ccr.commit(store, [ccr.prepare(catalog), span])
        assert ccr.recover(store, span.handle) == tool
        assert len(store.get(span.key) or b"") < 150  # no bytes of its own
        info = ccr.info(store, span.handle)
        assert (info.original_length, info.content_type) == (len(tool), "application/json")
        report = ccr.audit(store)
        assert (report.records, report.verified) == (2, 2)
        assert report.original_bytes == len(catalog) + len(tool)
        big = b"[" + b"0," * 900_000 + b'{"name":"late"}]'  # past a chunk of its record
        late = big[big.index(b'{"name"'):-1]
        ccr.commit(store, [ccr.prepare(big), _span(late, big)])
        assert ccr.recover(store, "ccr_" + ccr.digest_of(late)) == late

    def test_span_ending_at_its_records_last_byte_recovers(self, store: Store) -> None:
        """A tool whose bytes run to the end of its catalog's (a file without a trailing
        newline, the tool last) is no span past the end: it reads back and verifies."""
        catalog = b'  {"name":"alone","inputSchema":{"type":"object"}}'
        tool = catalog[2:]
        span = _span(tool, catalog)
        ccr.commit(store, [ccr.prepare(catalog), span])
        assert ccr.recover(store, span.handle) == tool
        assert ccr.unverified(store, [span.digest]) == set()
        assert (ccr.audit(store).verified, ccr.audit(store).excluded) == (2, {})

    def test_span_refused_when_its_record_is_gone_or_its_bytes_changed(self, store: Store) -> None:
        catalog, tool = _catalog_with(b'{"name":"t1"}')
        span = _span(tool, catalog)
        ccr.commit(store, [ccr.prepare(catalog), span])
        liar = ccr.prepare_span(ccr.digest_of(b"other"), len(tool), ccr.digest_of(catalog),
                                catalog.index(tool))
        past = ccr.prepare_span(ccr.digest_of(b"past"), 4, ccr.digest_of(catalog), len(catalog) - 2)
        ccr.commit(store, [liar, past])
        with pytest.raises(IntegrityError) as caught:
            ccr.recover(store, liar.handle)
        assert caught.value.reason == "digest mismatch"
        with pytest.raises(IntegrityError):
            ccr.recover(store, past.handle)
        assert ccr.audit(store).excluded == {"digest mismatch": 1, "corrupt": 1}
        store.delete([ccr.digest_of(catalog).encode()])
        with pytest.raises(IntegrityError) as caught:
            ccr.recover(store, span.handle)
        assert caught.value.reason == "span target missing"
        assert ccr.audit(store).excluded == {"span target missing": 3}

    def test_span_re_points_to_the_newest_record_holding_it(self, store: Store) -> None:
        tool = b'{"name":"shared"}'
        (first, _), (second, _) = _catalog_with(tool, b"a"), _catalog_with(tool, b"bb")
        ccr.commit(store, [ccr.prepare(first, now_ms=1_000), _span(tool, first, 1_000)])
        ccr.commit(store, [ccr.prepare(second, now_ms=5_000), _span(tool, second, 5_000)])
        value = store.get(ccr.digest_of(tool).encode()) or b""
        assert ccr.span_of(ccr.decode_header(value), value) == (ccr.digest_of(second),
                                                                 second.index(tool))
        info = ccr.info(store, "ccr_" + ccr.digest_of(tool))
        assert (info.first_stored, info.last_seen) == (1.0, 5.0)
        store.delete([ccr.digest_of(first).encode()])
        assert ccr.recover(store, "ccr_" + ccr.digest_of(tool)) == tool
        ccr.commit(store, [ccr.prepare(tool, now_ms=7_000)])  # stored whole: whole it stays
        ccr.commit(store, [ccr.prepare(second, now_ms=8_000), _span(tool, second, 8_000)])
        value = store.get(ccr.digest_of(tool).encode()) or b""
        assert ccr.decode_header(value).codec == ccr.CODEC_ZSTD
        assert ccr.info(store, "ccr_" + ccr.digest_of(tool)).last_seen == 8.0
        store.delete([ccr.digest_of(second).encode()])
        assert ccr.recover(store, "ccr_" + ccr.digest_of(tool)) == tool

    def test_prune_keeps_a_span_and_the_record_it_lies_in_together(
            self, store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
        """A record is kept while a span lying in it is seen, and a span while its record
        is (a tool's record while its catalog's is: a run that commits a catalog again
        touches its tools' records only once a run); both re-checked inside the delete
        transaction (a span or a record touched mid-prune keeps the other)."""
        day = 24 * 3_600_000
        catalogs = {name: _catalog_with(b'{"name":"%s"}' % name, name) for name in
                    (b"live", b"both", b"busy", b"tool", b"late")}
        for catalog, tool in catalogs.values():
            ccr.commit(store, [ccr.prepare(catalog, now_ms=1_000), _span(tool, catalog, 1_000)])
        digest = {name: (ccr.digest_of(c), ccr.digest_of(t)) for name, (c, t) in catalogs.items()}
        ccr.touch(store, [digest[b"live"][1]], now_ms=9 * day)  # the span seen, its catalog not
        ccr.touch(store, [digest[b"tool"][0]], now_ms=9 * day)  # the catalog seen, its span not
        scan = ccr.iter_verified
        siblings = b'{"server":"sib","tools":[{"name":"a"},{"name":"b"},{"name":"c"}]}'
        tools = [b'{"name":"%s"}' % n for n in (b"a", b"b", b"c")]
        ccr.commit(store, [ccr.prepare(siblings, now_ms=1_000),
                           *(_span(tool, siblings, 1_000) for tool in tools)])
        # a dry run names what a prune would drop, and no span whose record was seen
        # (nor a record a span seen lies in)
        would = {r.handle for r in ccr.prune(store, 7 * 86_400, dry_run=True, now_ms=10 * day)}
        assert would == {"ccr_" + d for name in (b"both", b"busy", b"late") for d in digest[name]} \
            | {"ccr_" + ccr.digest_of(t) for t in (siblings, *tools)}

        def scan_then_touch(s: Store, audit: ccr.Audit | None = None) -> Any:
            yield from scan(s, audit)
            ccr.touch(s, [digest[b"busy"][1]], now_ms=10 * day)  # a span touched mid-prune
            ccr.touch(s, [digest[b"late"][0]], now_ms=10 * day)  # a catalog touched mid-prune
            ccr.touch(s, [ccr.digest_of(tools[1])], now_ms=10 * day)  # one of three spans

        monkeypatch.setattr(ccr, "iter_verified", scan_then_touch)
        dropped = ccr.prune(store, 7 * 86_400, now_ms=10 * day)
        gone = {"ccr_" + digest[b"both"][0], "ccr_" + digest[b"both"][1]}
        assert {r.handle for r in dropped} == gone
        for tool in tools:  # (the one seen keeps its catalog, and so the others)
            assert ccr.recover(store, "ccr_" + ccr.digest_of(tool)) == tool
        for name in (b"live", b"busy", b"tool", b"late"):
            assert ccr.recover(store, "ccr_" + digest[name][1]) == catalogs[name][1]
            assert ccr.recover(store, "ccr_" + digest[name][0]) == catalogs[name][0]
        assert all(store.get(h[4:].encode()) is None for h in gone)

    def test_commit_held_never_leaves_a_span_naming_a_record_gone(
            self, store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
        """Tool records (spans) committed apart from their catalog's record, as the index
        writer does: a span committed between a prune's scan and its delete transaction
        keeps the catalog (refreshed with it), and one committed after a prune removed the
        catalog is not written (its catalog reported gone). Before, both left a span whose
        bytes were gone (`verify`: "span target missing")."""
        day = 24 * 3_600_000
        late, gone = (_catalog_with(b'{"name":"%s"}' % n, n) for n in (b"late", b"gone"))
        for catalog, _ in (late, gone):
            ccr.commit(store, [ccr.prepare(catalog, now_ms=1_000)])
        real = store.commit

        def scanned_then_span(items: Any, merge: Any = None) -> Any:
            monkeypatch.setattr(store, "commit", real)
            assert ccr.commit_held(store, [_span(late[1], late[0], 10 * day)], now_ms=10 * day) == []
            return real(items, merge)

        monkeypatch.setattr(store, "commit", scanned_then_span)
        dropped = ccr.prune(store, 7 * 86_400, now_ms=10 * day)
        assert {r.handle for r in dropped} == {"ccr_" + ccr.digest_of(gone[0])}
        assert ccr.recover(store, "ccr_" + ccr.digest_of(late[1])) == late[1]
        assert ccr.commit_held(store, [_span(gone[1], gone[0])]) == [ccr.digest_of(gone[0])]
        assert store.get(ccr.digest_of(gone[1]).encode()) is None
        assert not ccr.audit(store).excluded  # (no span naming bytes that are gone)
        whole = ccr.prepare(b'{"whole": true}')
        assert ccr.commit_held(store, [whole]) == []  # (a record no span: committed as ever)
        assert ccr.recover(store, whole.handle) == b'{"whole": true}'

    def test_a_span_pruned_or_re_pointed_between_its_two_reads_is_no_failure(
            self, store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
        """A span and the record it lies in are read apart: a prune between the two reads
        removes both, or a writer re-points the span to a newer record and a prune drops the
        old one. Neither is a failure: `verify` beside a prune failed on spans it removed
        meanwhile ("span target missing", exit 1), and `recover` refused a stored handle."""
        real = store.get
        tool = b'{"name":"shared"}'
        (first, _), (second, _) = _catalog_with(tool, b"a"), _catalog_with(tool, b"bb")
        key, old, new = (ccr.digest_of(b).encode() for b in (tool, first, second))
        handle = "ccr_" + key.decode()

        def after_reading_the_span(then: Any) -> None:
            def get(k: bytes) -> bytes | None:
                value = real(k)
                if k == key:  # the other writer commits before the span's record is read
                    monkeypatch.setattr(store, "get", real)
                    then()
                return value

            monkeypatch.setattr(store, "get", get)

        def re_point_and_prune() -> None:
            ccr.commit(store, [ccr.prepare(second), _span(tool, second)])
            store.delete([old])

        def prune_both() -> None:
            store.delete([key, new])

        def lies_in_first() -> None:
            store.delete([key, new])
            ccr.commit(store, [ccr.prepare(first), _span(tool, first)])

        lies_in_first()
        after_reading_the_span(re_point_and_prune)
        assert ccr.recover(store, handle) == tool
        lies_in_first()
        after_reading_the_span(re_point_and_prune)
        assert ccr.info(store, handle).original_length == len(tool)
        lies_in_first()
        after_reading_the_span(re_point_and_prune)
        report = ccr.audit(store)  # (`second`, committed after the listing began, may be in it)
        assert report.excluded == {} and report.verified == report.records >= 1
        after_reading_the_span(prune_both)
        with pytest.raises(UnknownHandleError):
            ccr.recover(store, handle)
        ccr.commit(store, [ccr.prepare(second), _span(tool, second), ccr.prepare(b"kept")])
        after_reading_the_span(prune_both)
        report = ccr.audit(store)  # (`second`, if listed before the span, was read before it went)
        assert report.excluded == {} and report.verified == report.records >= 1
        ccr.commit(store, [ccr.prepare(second), _span(tool, second)])
        with open_store("memory://") as target:
            after_reading_the_span(prune_both)
            report = ccr.migrate(store, target)
            assert report.excluded == {} and report.verified == report.records >= 1
            assert ccr.digest_of(b"kept").encode() in list(target.keys())
            assert ccr.audit(target).verified == report.verified
        ccr.commit(store, [_span(tool, second)])  # a span still there whose record is gone
        with pytest.raises(IntegrityError) as caught:
            ccr.recover(store, handle)
        assert caught.value.reason == "span target missing"

    def test_migrate_keeps_the_last_seen_a_touch_wrote(self, store: Store) -> None:
        """A record touched since it was stored (its ~seen entry) is last seen then in the
        copy too: a prune of the target keeps what the source's would."""
        day = 24 * 3_600_000
        handle = ccr.commit(store, [ccr.prepare(b"touched", now_ms=1_000)])[0]
        ccr.touch(store, [handle[4:]], now_ms=9 * day)
        with open_store("memory://") as target:
            ccr.migrate(store, target)
            assert ccr.info(target, handle).last_seen == 9 * day / 1000
            assert ccr.prune(target, 7 * 86_400, now_ms=10 * day) == []
            assert ccr.recover(target, handle) == b"touched"

    def test_migrate_writes_spans_after_the_records_they_lie_in(self, store: Store) -> None:
        pairs = [_catalog_with(b'{"name":"t%d"}' % i, b"%d" % i) for i in range(5)]
        for catalog, tool in pairs:
            ccr.commit(store, [ccr.prepare(catalog), _span(tool, catalog)])
        broken, lost = _catalog_with(b'{"name":"lost"}', b"x")
        ccr.commit(store, [ccr.prepare(broken), _span(lost, broken)])
        key = ccr.digest_of(broken).encode()
        value = store.get(key) or b""
        store.put(key, value[:-1] + bytes([value[-1] ^ 1]))  # its tail (a checksum) flipped
        commits: list[list[bytes]] = []
        with open_store("memory://") as target:
            write = target.commit

            def watched(items: Any, merge: Any = None) -> None:
                commits.append([k for k, _ in items])
                write(items, merge)

            target.commit = watched  # type: ignore[method-assign]
            report = ccr.migrate(store, target, batch_size=2)
            written = [k for batch in commits for k in batch]
            for catalog, tool in pairs:
                assert ccr.recover(target, "ccr_" + ccr.digest_of(tool)) == tool
                assert written.index(ccr.digest_of(catalog).encode()) < written.index(
                    ccr.digest_of(tool).encode())
            # the span verified (its bytes lie before the flipped tail): it goes over whole
            assert ccr.recover(target, "ccr_" + ccr.digest_of(lost)) == lost
            assert ccr.decode_header(target.get(ccr.digest_of(lost).encode()) or b"").codec == ccr.CODEC_ZSTD
            assert "span target not copied" not in report.excluded and sum(report.excluded.values()) == 1


    # -- hostile records: decompression bombs, foreign keys ------------------

    @pytest.mark.parametrize("declared", [1 << 40, 256 << 20, None])
    def test_zstd_bomb_refused_within_the_headers_length(
        self, store: Store, declared: int | None
    ) -> None:
        """A record whose frame would inflate past the length its header states is corrupt:
        refused by recover, excluded by audit, skipped by prune and migrate, healed by the
        next commit, each without inflating more than that length."""
        original = b'{"tools":[{"name":"bombed"}]}' * 30
        handle = ccr.store_original(store, original)
        store.put(handle[4:].encode(), bomb_record(original, declared))
        with bounded_allocations():
            with pytest.raises(IntegrityError) as refused:
                ccr.recover(store, handle)
            assert refused.value.reason == "corrupt"
            report = ccr.audit(store)
            assert (report.records, report.verified, report.excluded) == (1, 0, {"corrupt": 1})
            assert ccr.prune(store, 0, dry_run=True) == []
            with open_store("memory://") as target:
                assert ccr.migrate(store, target).excluded == {"corrupt": 1}
                assert list(target.keys()) == []
            assert ccr.store_original(store, original) == handle  # heals it
        assert ccr.recover(store, handle) == original

    def test_a_header_that_lies_with_its_frame_is_refused_unread(self, store: Store) -> None:
        """Header and frame both claim a length the payload could never inflate to."""
        original = b"small original"
        handle = ccr.store_original(store, original)
        lie = 1 << 40
        store.put(handle[4:].encode(), ccr.encode_record(lie, "application/json", 1, 1,
                                                         bomb_frame(lie, blocks=4)))
        with bounded_allocations():
            with pytest.raises(IntegrityError):
                ccr.recover(store, handle)
            assert ccr.audit(store).excluded == {"corrupt": 1}
            assert ccr.store_original(store, original) == handle
        assert ccr.recover(store, handle) == original

    def test_audit_of_a_consistent_bomb_stays_bounded(self, store: Store) -> None:
        """Header and frame agree on 256 MiB of real output that does not hash to the key:
        audit checks it streaming, never holding it."""
        original = b"another small original"
        handle = ccr.store_original(store, original)
        size = 256 << 20
        store.put(handle[4:].encode(), ccr.encode_record(size, "application/json", 1, 1,
                                                         bomb_frame(size, blocks=size >> 17)))
        with bounded_allocations():
            assert ccr.audit(store).excluded == {"digest mismatch": 1}
            assert ccr.store_original(store, original) == handle
        assert ccr.recover(store, handle) == original

    def test_foreign_keys_are_ignored_never_decoded(self, store: Store) -> None:
        handle = ccr.store_original(store, b"ours")
        digest = handle[4:]
        foreign = [digest[:8].encode() + b"\xff\xfe not ascii", digest[:8].encode() + b"\xc3",
                   b"\x80\x81", b"config", digest.upper().encode()]
        store.commit([(key, b"their value") for key in foreign])
        assert ccr.resolve(store, digest[:8]) == digest
        with pytest.raises(UnknownHandleError):
            ccr.resolve(store, "ffffffff")
        report = ccr.audit(store)
        assert (report.records, report.verified, report.foreign_keys) == (1, 1, len(foreign))
        assert report.excluded == {}
        assert ccr.prune(store, 0, now_ms=1 << 62) != []  # everything of ours is stale then
        assert sorted(store.keys()) == sorted(foreign)  # theirs untouched
        ccr.store_original(store, b"ours")
        with open_store("memory://") as target:
            assert ccr.migrate(store, target).verified == 1
            assert list(target.keys()) == [digest.encode()]


def bomb_frame(declared: int | None, blocks: int) -> bytes:
    """A zstd frame of `blocks` RLE blocks of 128 KiB ("A"), declaring `declared` bytes as
    its content size (None: no size), whatever it really inflates to."""
    if declared is None:
        head = b"\x28\xb5\x2f\xfd" + b"\x00" + b"\x58"  # no size; window descriptor 8 MiB
    else:
        head = b"\x28\xb5\x2f\xfd" + b"\xc0" + b"\x58" + struct.pack("<Q", declared)
    rle = (1 << 1) | (1 << 17 << 3)  # block type 1 (RLE), 128 KiB
    body = b"".join(struct.pack("<I", rle | (i == blocks - 1))[:3] + b"A" for i in range(blocks))
    return head + body


def bomb_record(original: bytes, declared: int | None) -> bytes:
    """A record whose header states `original`'s length but whose frame inflates to 1 GiB."""
    blocks = 1 << 13
    return ccr.encode_record(len(original), "application/json", 1, 1, bomb_frame(declared, blocks))


@contextlib.contextmanager
def bounded_allocations(limit: int = 16 << 20) -> Iterator[None]:
    """Fail if the block allocates more than `limit` bytes at once (zstd's output buffers
    are Python objects, so tracemalloc sees them)."""
    tracemalloc.start()
    try:
        yield
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < limit, f"peak allocation {peak:,} bytes"


def _catalog_with(tool: bytes, name: bytes = b"c") -> tuple[bytes, bytes]:
    """A catalog's bytes holding `tool` (not first), and the tool."""
    return b'{"server":"%s","tools":[{"name":"first"}, %s]}\n' % (name, tool), tool


def _span(tool: bytes, catalog: bytes, now_ms: int | None = None) -> ccr.Prepared:
    return ccr.prepare_span(ccr.digest_of(tool), len(tool), ccr.digest_of(catalog),
                            catalog.index(tool), now_ms=now_ms)
