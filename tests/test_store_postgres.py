"""The postgresql:// store: the shared contract, its URL, and what a fleet does to it
(hosts committing at once, a dropped connection, a read-only role, a server that goes
away mid-run). Every test runs against a real server (see the postgres_* fixtures in
conftest.py); the multi-process ones run this module as a script in child processes
(see `_child_main` at the bottom)."""

from __future__ import annotations

import json
import os
import random
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from caveman_batch import ccr
from caveman_batch.errors import (
    BackendUnavailableError,
    ForeignStoreError,
    StoreError,
    StoreURLError,
)
from caveman_batch.pipeline import LOCK_FILE
from caveman_batch.store import DELETE, Store, canonical_url, open_store, split_store_url
from caveman_batch.testing.postgres_server import Cluster, as_user, cannot_start
from caveman_batch.testing.store_contract import StoreContract

SCRIPT = Path(__file__).resolve()
CHILD_TIMEOUT_S = 120.0


class TestPostgresStore(StoreContract):
    @pytest.fixture
    def store_url(self, postgres_url: str) -> str:
        return postgres_url


def admin(url: str) -> object:
    import psycopg

    return psycopg.connect(url, autocommit=True)


# -- the URL ----------------------------------------------------------------------------


@pytest.mark.parametrize(("given", "printed"), [
    ("postgresql://app:s3cret@db.internal:5433/ccr", "postgresql://app@db.internal:5433/ccr"),
    ("postgresql://app@db/ccr?sslmode=require&password=s3cret&connect_timeout=5",
     "postgresql://app@db/ccr?sslmode=require&connect_timeout=5"),
    ("postgresql://app:p%40ss%2Fw@h1:5432,h2:5433/ccr?target_session_attrs=read-write",
     "postgresql://app@h1:5432,h2:5433/ccr?target_session_attrs=read-write"),
    ("postgresql:///ccr?host=%2Frun%2Fpostgresql", "postgresql:///ccr?host=%2Frun%2Fpostgresql"),
    ("postgresql://", "postgresql://"),  # all from libpq's PG* variables, as psql
    ("postgres://u:x@[::1]:5432/d", "postgresql://u@[::1]:5432/d"),
    # the client key's passphrase (a raw / in a password: refused, below)
    ("postgresql://app@db/ccr?sslpassword=k3y&sslmode=verify-full",
     "postgresql://app@db/ccr?sslmode=verify-full"),
])
def test_the_url_prints_back_without_its_password(given: str, printed: str) -> None:
    assert canonical_url(given) == printed


def test_libpq_query_parameters_are_allowed_for_postgresql_only() -> None:
    url = "postgresql://app@db/ccr?sslmode=require&application_name=gw-7"
    assert split_store_url(url) == ("postgresql", "app@db/ccr?sslmode=require&application_name=gw-7")
    assert split_store_url("postgres://db/x?sslmode=verify-full")[0] == "postgres"
    for refused in ("sqlite:///x.db?sslmode=require", "lmdb:///x?a=b", "postgresql://db/x#frag"):
        with pytest.raises(StoreURLError):
            split_store_url(refused)


def test_without_psycopg_the_scheme_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "psycopg", None)  # import psycopg -> ImportError
    monkeypatch.delitem(sys.modules, "backends.postgres_store", raising=False)
    with pytest.raises(BackendUnavailableError) as exc:
        open_store("postgresql://db.internal/ccr")
    assert "pip install 'caveman-batch[postgres]'" in str(exc.value)
    assert exc.value.exit_code == 1


def test_the_password_is_never_printed(postgres_url: str) -> None:
    """In the URL's user part or its query: not in str, repr, nor an error message."""
    with_password = postgres_url.replace("://postgres@", "://postgres:s3cret-pw@", 1)
    assert "s3cret-pw" in with_password
    with open_store(with_password) as store:  # trust authentication: the password is unused
        assert "s3cret-pw" not in str(store) + repr(store)
        assert str(store) == postgres_url
        ccr.store_original(store, b"x")
    nowhere = with_password.replace("@/postgres?", "@/no_such_db?", 1) + "&password=s3cret-pw"
    with pytest.raises(StoreError) as exc:
        open_store(nowhere)
    assert "no_such_db" in str(exc.value) and "s3cret-pw" not in str(exc.value)


@pytest.mark.parametrize("url", ["postgresql://app:pa#s3cret@db/ccr", "postgresql:app:s3cret@db/ccr",
                                 "postgresql://app:s3cret@db/ccr#x", "post gres://app:s3cret@db"])
def test_a_store_url_refused_is_named_without_its_password(url: str) -> None:
    with pytest.raises(StoreURLError) as exc:
        split_store_url(url)
    assert "s3cret" not in str(exc.value) and "app" in str(exc.value)


@pytest.mark.parametrize("url", ["postgresql://app:p@ss-s3cret@nohost.invalid/ccr",
                                 "postgresql://app:p@ss-s3cret@h1,h2:5433/ccr?sslmode=require"])
def test_an_at_sign_in_the_password_is_refused_before_libpq_quotes_its_tail(url: str) -> None:
    """libpq ends the user part at the first `@`: it sent `p` as the password and named
    `ss-s3cret@nohost.invalid` as the host it could not resolve, in the message we print."""
    for attempt in (lambda: canonical_url(url), lambda: open_store(url)):
        with pytest.raises(StoreURLError) as exc:
            attempt()
        assert "s3cret" not in str(exc.value) and "%40" in str(exc.value)
        assert exc.value.exit_code == 1
    assert canonical_url(url.replace("p@ss", "p%40ss")).startswith("postgresql://app@")


@pytest.mark.parametrize("url", ["postgresql://app:pa/ss-s3cret@nohost.invalid/ccr",
                                 "postgresql://app:12/ss-s3cret@nohost.invalid",
                                 "postgresql://nohost.invalid/my@db"])
def test_a_slash_in_the_password_is_refused_before_libpq_sends_its_tail(url: str) -> None:
    """libpq ends the host part at the first `/`: it connected to host `app` (port `pa`)
    and sent `ss-s3cret@nohost.invalid/ccr` as the database name, which a server there
    quotes back (`database "ss-s3cret@..." does not exist`). An `@` in a database name
    reads the same, so it is asked for as %40."""
    for attempt in (lambda: canonical_url(url), lambda: open_store(url)):
        with pytest.raises(StoreURLError) as exc:
            attempt()
        assert "s3cret" not in str(exc.value) and "%2F" in str(exc.value)
        assert "%40" in str(exc.value) and exc.value.exit_code == 1
    assert canonical_url(url.replace("pa/ss", "pa%2Fss").replace("12/ss", "12%2Fss")
                         .replace("my@db", "my%40db")).startswith("postgresql://")


def test_no_command_prints_the_password(postgres_url: str, tmp_path: Path) -> None:
    """The summary of compress (text, --json; the URL given or from CAVEMAN_CCR_STORE) and
    shrink's report named the store by the URL as given, password and all."""
    url = postgres_url.replace("://postgres@", "://postgres:s3cret-pw@", 1)
    url += "&sslpassword=k3y-pass"
    src = Path(__file__).resolve().parents[1] / "bench_data" / "samples" / "registry.jsonl"
    runs = [(["compress", str(src), "-o", str(tmp_path / "a"), "--store", url], {}),
            (["compress", str(src), "-o", str(tmp_path / "b"), "--json"], {"CAVEMAN_CCR_STORE": url}),
            (["shrink", str(src.parent / "registry-array.json"), "-o", str(tmp_path / "c.json"),
              "--store", url], {})]
    for argv, env in runs:
        done = subprocess.run([sys.executable, "-m", "caveman_batch", *argv], capture_output=True,
                              timeout=120, env={**os.environ, **env})
        printed = done.stdout.decode() + done.stderr.decode()
        assert done.returncode == 0, printed
        assert "s3cret-pw" not in printed and "k3y-pass" not in printed, printed
        assert "postgresql://postgres@" in printed


# -- what is ours, who may write ----------------------------------------------------------


def test_a_store_made_by_another_host_while_this_one_waits_is_opened(postgres_url: str) -> None:
    """Two hosts opening a new store at once: the one that waited for the other's
    creation finds its table (a catalog lookup cached before the wait must not say
    there is none, and CREATE TABLE fail on the one made meanwhile)."""
    from backends import postgres_store

    maker = admin(postgres_url)
    opened: list[object] = []
    try:
        with maker.transaction():  # type: ignore[attr-defined]
            maker.execute("SELECT pg_advisory_xact_lock(%s)",  # type: ignore[attr-defined]
                          (postgres_store._CREATE_LOCK,))
            thread = threading.Thread(target=lambda: opened.append(_open_or_error(postgres_url)))
            thread.start()
            deadline = time.monotonic() + CHILD_TIMEOUT_S
            while not maker.execute(  # type: ignore[attr-defined]
                    "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
            ).fetchone()[0]:
                assert time.monotonic() < deadline and thread.is_alive(), opened
                time.sleep(0.01)
            postgres_store._create_table(maker)  # type: ignore[arg-type]
        thread.join(CHILD_TIMEOUT_S)
    finally:
        maker.close()  # type: ignore[attr-defined]
    assert opened == ["opened"]


def _open_or_error(url: str) -> str:
    try:
        with open_store(url) as store:
            ccr.store_original(store, b"x")
    except StoreError as exc:
        return str(exc)
    return "opened"


def test_a_table_of_that_name_not_ours_is_refused_untouched(postgres_url: str,
                                                            postgres_server: str) -> None:
    schema = postgres_url.rsplit("%3D", 1)[1]
    with admin(postgres_server) as conn:  # type: ignore[attr-defined]
        conn.execute(f"CREATE TABLE {schema}.caveman_ccr (key bytea PRIMARY KEY, value bytea)")
        conn.execute(f"INSERT INTO {schema}.caveman_ccr VALUES ('k', 'theirs')")
    for kwargs in ({}, {"create": False}, {"readonly": True}):
        with pytest.raises(ForeignStoreError) as exc:
            open_store(postgres_url, **kwargs)
        assert "caveman_ccr" in str(exc.value) and exc.value.exit_code == 1
    with admin(postgres_server) as conn:  # type: ignore[attr-defined]
        rows = conn.execute(f"SELECT key, value FROM {schema}.caveman_ccr").fetchall()
        assert rows == [(b"k", b"theirs")]


@pytest.fixture
def reader_role(postgres_url: str, postgres_server: str) -> Iterator[str]:
    """A role that may read the store's table, not write it; its store URL."""
    schema = postgres_url.rsplit("%3D", 1)[1]
    role = f"reader_{schema}"
    with open_store(postgres_url):
        pass  # made by the owner
    with admin(postgres_server) as conn:  # type: ignore[attr-defined]
        conn.execute(f"CREATE ROLE {role} LOGIN")
        conn.execute(f"GRANT USAGE ON SCHEMA {schema} TO {role}")
        conn.execute(f"GRANT SELECT ON {schema}.caveman_ccr TO {role}")
    try:
        yield as_user(postgres_url, role)
    finally:
        with admin(postgres_server) as conn:  # type: ignore[attr-defined]
            conn.execute(f"DROP OWNED BY {role}")
            conn.execute(f"DROP ROLE {role}")


def test_a_read_only_role_reads_and_is_told_clearly_it_may_not_write(
    postgres_url: str, reader_role: str, capfd: pytest.CaptureFixture[str]
) -> None:
    with open_store(postgres_url) as store:
        handle = ccr.store_original(store, b"shared original")
    with pytest.raises(StoreError) as exc:
        open_store(reader_role)
    assert "may not write" in str(exc.value) and "reader_" in str(exc.value)
    with open_store(reader_role, readonly=True) as store:
        assert ccr.recover(store, handle) == b"shared original"
    from caveman_batch import cli

    assert cli.main(["recover", handle, "--store", reader_role]) == 0
    assert capfd.readouterr().out == "shared original"


# -- faults -------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize("command", [["stats"], ["recover", "ccr_0123456789abcdef"],
                                     ["compress", "-", "-o", "OUT"]])
def test_an_unreachable_server_at_start_is_exit_2_at_once_without_traceback(
    command: list[str], tmp_path: Path
) -> None:
    url = f"postgresql://app:pw@127.0.0.1:{free_port()}/ccr"
    argv = [a.replace("OUT", str(tmp_path / "out")) for a in command]
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "caveman_batch", *argv, "--store", url],
                          input=b'{"tools":[]}\n', capture_output=True, timeout=60)
    assert time.monotonic() - started < 20
    err = done.stderr.decode()
    assert done.returncode == 2, err
    assert "Traceback" not in err and f"127.0.0.1:{url.rsplit(':', 1)[1]}" in err
    assert "connect" in err and ":pw@" not in err
    out = tmp_path / "out"  # nothing written but the run's lock
    assert not out.exists() or [p.name for p in out.iterdir()] in ([], [LOCK_FILE])


def backend_pid(store: Store) -> int:
    conn = store._conn  # type: ignore[attr-defined]
    return int(conn.info.backend_pid)


def test_a_connection_dropped_between_batches_is_reopened_and_the_batch_retried(
    postgres_url: str, postgres_server: str
) -> None:
    with open_store(postgres_url) as store:
        first = ccr.store_original(store, b"before the drop")
        pid = backend_pid(store)
        with admin(postgres_server) as conn:  # type: ignore[attr-defined]
            conn.execute("SELECT pg_terminate_backend(%s)", (pid,))
        second = ccr.store_original(store, b"after the drop")  # retried on a new connection
        assert backend_pid(store) != pid
        assert ccr.recover(store, first) == b"before the drop"
        assert ccr.recover(store, second) == b"after the drop"
        with admin(postgres_server) as conn:  # type: ignore[attr-defined]
            conn.execute("SELECT pg_terminate_backend(%s)", (backend_pid(store),))
        assert ccr.recover(store, second) == b"after the drop"  # reads too


def test_a_server_gone_for_good_is_a_store_error(postgres_cluster: Cluster) -> None:
    with open_store(postgres_cluster.url()) as store:
        ccr.store_original(store, b"committed")
        postgres_cluster.stop()
        with pytest.raises(StoreError) as exc:
            ccr.store_original(store, b"never committed")
        assert "postgresql://postgres@" in str(exc.value)
        assert "unreachable or went away" in str(exc.value)
        postgres_cluster.start()
        assert ccr.recover(store, "ccr_" + ccr.digest_of(b"committed")) == b"committed"


def test_a_statement_timeout_is_named_as_one(postgres_url: str) -> None:
    """Not "the server is unreachable or went away" (QueryCanceled is an OperationalError)."""
    url = postgres_url + "&options=-c%20statement_timeout%3D1"
    with pytest.raises(StoreError) as exc, open_store(url) as store:
        ccr.commit(store, [ccr.prepare(os.urandom(1 << 20)) for _ in range(64)])
    assert "statement_timeout" in str(exc.value) and "went away" not in str(exc.value)


def test_a_server_restarted_mid_run_is_waited_for(postgres_cluster: Cluster) -> None:
    """The server stopped, and started again 1.5 s later (a `pg_ctl restart`): a commit
    meanwhile waits for it and lands (it retried once, at once, and failed: the server
    was still shutting down, or not yet up)."""
    with open_store(postgres_cluster.url()) as store:
        ccr.store_original(store, b"before the restart")
        postgres_cluster.stop()
        starter = threading.Timer(1.5, postgres_cluster.start)
        starter.start()
        try:
            handle = ccr.store_original(store, b"during the restart")
        finally:
            starter.join()
        assert ccr.recover(store, handle) == b"during the restart"


def test_a_cluster_starts_as_root_with_runuser_off_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """Run as root, the server runs through runuser, which Debian keeps in /usr/sbin: a PATH
    without it (an unprivileged user's, `env -i PATH=/usr/bin:/bin`) still starts one."""
    if os.geteuid() != 0:
        pytest.skip("only root runs the server through runuser")
    if (reason := cannot_start()) is not None:
        pytest.skip(reason)
    if shutil.which("runuser", path="/usr/sbin:/sbin") is None:
        pytest.skip("runuser does not lie in /usr/sbin or /sbin here")
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    if shutil.which("runuser") is not None:
        pytest.skip("runuser lies in /usr/bin or /bin here: nothing off PATH to find")
    with Cluster.start_new() as cluster, open_store(cluster.url()) as store:
        ccr.store_original(store, b"through runuser")
        assert ccr.recover(store, "ccr_" + ccr.digest_of(b"through runuser")) == b"through runuser"


def jsonl_catalog(index: int) -> bytes:
    rng = random.Random(index)
    tools = [{"name": f"tool_{index}_{t}", "description": " ".join(
        rng.choice(["list", "get", "the", "repository", "issues", "for", "a", "user", "page"])
        for _ in range(30)), "inputSchema": {"type": "object", "properties": {
            "id": {"type": "string", "description": "The identifier."}}}} for t in range(4)]
    return json.dumps({"name": f"server-{index}", "tools": tools}).encode() + b"\n"


def handles_in(root: Path) -> set[str]:
    import re

    found: set[str] = set()
    for path in root.rglob("*"):
        if path.is_file():
            found |= set(re.findall(r"ccr_[0-9a-f]{64}", path.read_text(errors="replace")))
    return found


def records_in(url: str) -> int:
    with open_store(url) as store:
        return sum(1 for key in store.keys() if len(key) == 64)


def test_a_server_restart_mid_run_fails_it_cleanly_and_a_rerun_finishes(
    postgres_cluster: Cluster, tmp_path: Path
) -> None:
    """The run reads JSONL from a pipe: the first batches are committed, the server stops,
    the rest arrives. Exit 2 with a clear message; nothing published names an original
    the store lacks; with the server back, the same run finishes."""
    url = postgres_cluster.url()
    out = tmp_path / "out"
    lines = [jsonl_catalog(i) for i in range(400)]
    argv = [sys.executable, "-m", "caveman_batch", "compress", "-", "-o", str(out),
            "--store", url, "--workers", "1", "-q"]
    run = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE)
    assert run.stdin is not None
    run.stdin.write(b"".join(lines[:200]))
    run.stdin.flush()
    deadline = time.monotonic() + CHILD_TIMEOUT_S
    while records_in(url) < 64:  # a first batch committed
        assert time.monotonic() < deadline and run.poll() is None
        time.sleep(0.1)
    postgres_cluster.stop()
    try:
        run.stdin.write(b"".join(lines[200:]))
        run.stdin.close()
    except BrokenPipeError:
        pass
    _, err = run.communicate(timeout=CHILD_TIMEOUT_S)
    text = err.decode()
    assert run.returncode == 2, text
    assert "Traceback" not in text and url in text
    postgres_cluster.start()
    with open_store(url) as store:  # every handle published is recoverable
        for handle in handles_in(out):
            ccr.recover(store, handle)
    done = subprocess.run(argv, input=b"".join(lines), capture_output=True,
                          timeout=CHILD_TIMEOUT_S)
    assert done.returncode == 0, done.stderr.decode()
    rows = [json.loads(line) for line in (out / "manifest.jsonl").read_bytes().splitlines()]
    assert len(rows) == 400 and all(r["status"] == "ok" for r in rows)
    with open_store(url) as store:
        for row, line in zip(rows, lines):
            assert ccr.recover(store, row["handle"]) == line.rstrip(b"\n")


# -- many writers -------------------------------------------------------------------------


def count_up(key: bytes, old: bytes | None, new: bytes) -> bytes:
    """A read-modify-write: a lost update shows as a count too low."""
    return str(int(old or b"0") + 1).encode()


def test_two_hosts_read_modify_write_the_same_keys_without_losing_one(postgres_url: str) -> None:
    """Two stores (two connections, as two hosts have) incrementing the same counters at
    once, each batch in another order: every increment lands."""
    rounds, keys = 40, [b"counter-%d" % i for i in range(6)]
    stores = [open_store(postgres_url), open_store(postgres_url)]
    errors: list[BaseException] = []

    def host(store: Store, seed: int) -> None:
        rng = random.Random(seed)
        try:
            for _ in range(rounds):
                batch = rng.sample(keys, len(keys))
                store.commit([(k, b"") for k in batch], merge=count_up)
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=host, args=(s, i)) for i, s in enumerate(stores)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(CHILD_TIMEOUT_S)
    for s in stores:
        s.close()
    assert not errors
    with open_store(postgres_url) as store:
        assert {k: store.get(k) for k in keys} == {k: str(2 * rounds).encode() for k in keys}


@pytest.mark.parametrize("keys", [1, 1500], ids=["key_locks", "table_lock"])
def test_a_guard_being_deleted_on_another_host_is_waited_for(postgres_url: str, keys: int) -> None:
    """commit_present (an incremental rerun's touch_held) while another host's prune has
    deleted the guard but not yet committed: it waits, then says the guard is absent and
    writes nothing behind it (with few keys and with more than the per-key lock limit)."""
    guards = [b"record-%05d" % i for i in range(keys)]
    with open_store(postgres_url) as pruner, open_store(postgres_url) as rerun:
        pruner.commit([(g, b"r") for g in guards])
        deleting, failed = threading.Event(), []

        def slow_delete(_key: bytes, _old: bytes | None, _new: bytes) -> object:
            deleting.set()  # inside the pruner's transaction, its locks held
            time.sleep(0.5)
            return DELETE

        def prune() -> None:
            try:
                pruner.commit([(guards[0], b"")], merge=slow_delete)  # type: ignore[arg-type]
            except BaseException as exc:  # reported below
                failed.append(exc)

        thread = threading.Thread(target=prune)
        thread.start()
        assert deleting.wait(CHILD_TIMEOUT_S)
        absent = rerun.commit_present([(g, b"~seen-" + g, b"now") for g in guards])
        thread.join(CHILD_TIMEOUT_S)
        assert not failed
        assert absent == [guards[0]]
        assert rerun.get(b"~seen-" + guards[0]) is None
        assert all(rerun.get(b"~seen-" + g) == b"now" for g in guards[1:3])


def shared_original(index: int) -> bytes:
    return b'{"tools":[{"name":"shared-%d"}]}' % index + random.Random(index).randbytes(300)


def own_original(writer: int, index: int) -> bytes:
    return b'{"tools":[{"name":"own-%d-%d"}]}' % (writer, index) + random.Random(index).randbytes(300)


def test_two_processes_commit_the_same_and_different_originals_at_once(postgres_url: str) -> None:
    """Each commits every shared original and its own ones in batches, and bumps the same
    counters; afterwards every record verifies and no increment is lost."""
    go = SCRIPT.parent / f".go-{random.getrandbits(32)}"
    children = [subprocess.Popen([sys.executable, str(SCRIPT), "writer", postgres_url, str(w),
                                  str(go)], stderr=subprocess.PIPE) for w in range(2)]
    try:
        time.sleep(0.5)
        go.touch()
        for child in children:
            assert child.wait(CHILD_TIMEOUT_S) == 0, child.stderr.read().decode()  # type: ignore[union-attr]
    finally:
        go.unlink(missing_ok=True)
    with open_store(postgres_url) as store:
        report = ccr.audit(store)
        assert (report.records, report.verified, report.excluded) == (200, 200, {})
        for i in range(100):
            assert ccr.recover(store, "ccr_" + ccr.digest_of(shared_original(i))) == shared_original(i)
        for w in range(2):
            for i in range(50):
                assert ccr.recover(store, "ccr_" + ccr.digest_of(own_original(w, i))) == own_original(w, i)
        assert store.get(b"~counter") == b"%d" % (2 * WRITER_BATCHES)


WRITER_BATCHES = 25


def child_writer(url: str, writer: int, go: Path) -> None:
    rng = random.Random(writer)
    shared = [shared_original(i) for i in range(100)]
    own = [own_original(writer, i) for i in range(50)]
    everything = shared + own
    rng.shuffle(everything)
    while not go.exists():
        time.sleep(0.01)
    with open_store(url) as store:
        for b in range(WRITER_BATCHES):
            batch = everything[b * 6:(b + 1) * 6]
            ccr.store_originals(store, batch)
            store.commit([(b"~counter", b"")], merge=count_up)


# -- migrate, and the commands on a postgres store -------------------------------------------


def test_migrate_lmdb_to_postgres_to_sqlite_byte_for_byte(postgres_url: str, tmp_path: Path,
                                                          capfd: pytest.CaptureFixture[str]) -> None:
    from caveman_batch import cli

    lmdb_url, sqlite_url = f"lmdb://{tmp_path}/a.lmdb", f"sqlite://{tmp_path}/c.db"
    with open_store(lmdb_url) as store:
        for i in range(300):
            ccr.commit(store, [ccr.prepare(own_original(7, i), now_ms=1_000 + i)])
        ccr.touch(store, [ccr.digest_of(own_original(7, i)) for i in range(0, 300, 3)], now_ms=9_000)
        expected = {k: v for k, v in store.items() if not k.startswith(ccr.SEEN_PREFIX)}
        times = {d: (ccr.info(store, d).first_stored, ccr.info(store, d).last_seen)
                 for d in (k.decode() for k in expected)}
    assert cli.main(["migrate", "--store", lmdb_url, "--to", postgres_url]) == 0
    assert cli.main(["migrate", "--store", postgres_url, "--to", sqlite_url]) == 0
    capfd.readouterr()
    with open_store(postgres_url) as pg, open_store(sqlite_url) as sq:
        for store in (pg, sq):
            assert list(store.keys()) == sorted(expected)
            for digest, (first, last) in times.items():
                info = ccr.info(store, digest)
                assert (info.first_stored, info.last_seen) == (first, last)
        # the ~seen times went into the copies' headers: equal to each other byte for byte
        assert dict(pg.items()) == dict(sq.items())
        touched = ccr.digest_of(own_original(7, 0)).encode()
        assert pg.get(touched) != expected[touched] and ccr.info(pg, touched.decode()).last_seen == 9.0
        untouched = ccr.digest_of(own_original(7, 1)).encode()
        assert pg.get(untouched) == expected[untouched]


def test_stats_verify_prune_on_a_postgres_store(postgres_url: str,
                                                capfd: pytest.CaptureFixture[str]) -> None:
    from caveman_batch import cli

    with open_store(postgres_url) as store:
        ccr.commit(store, [ccr.prepare(b"old", now_ms=1_000), ccr.prepare(b"new")])
    capfd.readouterr()
    assert cli.main(["stats", "--json", "--store", postgres_url]) == 0
    report = json.loads(capfd.readouterr().out)
    assert (report["records"], report["verified"], report["store"]) == (2, 2, postgres_url)
    assert cli.main(["verify", "--store", postgres_url]) == 0
    assert cli.main(["prune", "--not-seen-for", "7d", "--store", postgres_url]) == 0
    capfd.readouterr()
    with open_store(postgres_url) as store:
        assert [k.decode() for k in store.keys()] == [ccr.digest_of(b"new")]


def _waiting(conn: object, pid: int, *, row: bool) -> bool:
    """Whether backend `pid` waits for a lock (`row`: a row's, else an advisory one)."""
    found = conn.execute(  # type: ignore[attr-defined]
        "SELECT wait_event_type, wait_event FROM pg_stat_activity WHERE pid = %s", (pid,)).fetchone()
    return found is not None and found[0] == "Lock" and (found[1] in ("transactionid", "tuple")
                                                          if row else found[1] == "advisory")


def _wait_until(check: object, what: str) -> None:
    deadline = time.monotonic() + CHILD_TIMEOUT_S
    while not check():  # type: ignore[operator]
        assert time.monotonic() < deadline, what
        time.sleep(0.02)


def test_a_prune_retried_on_a_new_connection_reports_only_what_it_dropped(
        postgres_url: str, postgres_server: str) -> None:
    """A prune whose transaction is run again (its connection dropped mid-transaction) kept
    what its first attempt had decided: a record the first attempt dropped, and a run
    touched before the retry, was kept by the retry yet reported dropped (its handle
    printed as gone, counted in "dropped N"). The retry starts from clean state."""
    import psycopg

    originals = [b"record %d" % i for i in range(200)]  # 400 items: two chunks of writes
    with open_store(postgres_url) as store, open_store(postgres_url) as other:
        ccr.commit(store, [ccr.prepare(o, now_ms=1_000) for o in originals])
        digests = sorted(ccr.digest_of(o) for o in originals)
        first, later = digests[0], digests[150]  # in the first chunk of writes; in the second
        pid = backend_pid(store)
        with psycopg.connect(postgres_url) as blocker, admin(postgres_server) as watch:
            # a row of the second chunk locked: the prune's first attempt waits there, its
            # first chunk's records (`first` among them) deleted, not yet committed
            blocker.execute("SELECT 1 FROM caveman_ccr WHERE key = %s FOR UPDATE",
                            (later.encode(),))
            dropped: list[list[ccr.RecordInfo]] = []
            pruning = threading.Thread(target=lambda: dropped.append(
                ccr.prune(store, 7 * 86400)))
            pruning.start()
            _wait_until(lambda: _waiting(watch, pid, row=True), "the prune never reached the lock")
            # a run touches `first` meanwhile: it waits for the prune's lock on its ~seen key
            touching = threading.Thread(target=lambda: ccr.touch(other, [first]))
            touching.start()
            _wait_until(lambda: _waiting(watch, backend_pid(other), row=False),
                        "the touch never waited for the prune")
            watch.execute("SELECT pg_terminate_backend(%s)", (pid,))  # type: ignore[attr-defined]
            touching.join(CHILD_TIMEOUT_S)
            blocker.rollback()
            pruning.join(CHILD_TIMEOUT_S)
        assert not pruning.is_alive() and not touching.is_alive()
        assert backend_pid(store) != pid  # retried on a new connection
        left = [k.decode() for k in store.keys() if not k.startswith(ccr.SEEN_PREFIX)]
        assert left == [first]  # the retry saw the touch: kept
        reported = {r.handle for r in dropped[0]}
        assert ccr.make_handle(first) not in reported
        assert reported == {ccr.make_handle(d) for d in digests[1:]}


def test_a_forked_child_opens_its_own_connection(postgres_url: str) -> None:
    """The pipeline forks workers while the parent holds the store: the child's use (and
    its exit) must leave the parent's session alone."""
    import os

    with open_store(postgres_url) as store:
        ccr.store_original(store, b"parent")
        parent_pid = backend_pid(store)
        child = os.fork()
        if child == 0:
            try:
                ccr.store_original(store, b"child")
                code = 0 if backend_pid(store) != parent_pid else 3
            except BaseException:
                code = 4
            os._exit(code)
        _, status = os.waitpid(child, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        session = store._conn  # type: ignore[attr-defined]  # the same session, still open:
        assert session.execute("SELECT pg_backend_pid()").fetchone() == (parent_pid,)
        assert ccr.recover(store, "ccr_" + ccr.digest_of(b"child")) == b"child"


def _child_main(role: str, args: list[str]) -> None:
    if role == "writer":
        child_writer(args[0], int(args[1]), Path(args[2]))
    else:
        raise SystemExit(f"unknown role {role}")


if __name__ == "__main__":
    sys.path.insert(0, str(SCRIPT.parents[1]))
    _child_main(sys.argv[1], sys.argv[2:])


# -- damage verify must find --------------------------------------------------------------


def test_a_row_its_key_index_does_not_list_fails_verify(postgres_url: str,
                                                        postgres_server: str) -> None:
    """A row the primary key's index does not list (put back while the index was off): every
    lookup goes through the index and misses it (recover: unknown handle) while the table
    holds it, and verify said all verified, exit 0."""
    from caveman_batch import cli

    schema = postgres_url.rsplit("%3D", 1)[1]
    with open_store(postgres_url) as store:
        handles = ccr.store_originals(store, [b"first original", b"second original"])
    key = handles[0][len("ccr_"):].encode()
    assert cli.main(["verify", "--store", postgres_url]) == 0
    index = f"{schema}.caveman_ccr_pkey"
    with admin(postgres_server) as conn:  # type: ignore[attr-defined]
        conn.execute(f"CREATE TEMP TABLE kept AS SELECT * FROM {schema}.caveman_ccr WHERE key = %s",
                     (key,))
        conn.execute(f"DELETE FROM {schema}.caveman_ccr WHERE key = %s", (key,))
        conn.execute("UPDATE pg_index SET indisready = false WHERE indexrelid = %s::regclass",
                     (index,))
        conn.execute(f"INSERT INTO {schema}.caveman_ccr SELECT * FROM kept")
        conn.execute("UPDATE pg_index SET indisready = true WHERE indexrelid = %s::regclass",
                     (index,))
    assert cli.main(["verify", "--store", postgres_url]) == 1


def test_a_value_column_changed_by_hand_is_said_not_a_traceback(postgres_url: str,
                                                                 postgres_server: str) -> None:
    schema = postgres_url.rsplit("%3D", 1)[1]
    with open_store(postgres_url) as store:
        ccr.store_original(store, b"an original")
    with admin(postgres_server) as conn:  # type: ignore[attr-defined]
        conn.execute(f"ALTER TABLE {schema}.caveman_ccr ALTER COLUMN value TYPE text "
                     "USING encode(value, 'base64')")
    for kwargs in ({}, {"readonly": True}):
        with pytest.raises(StoreError, match="layout was changed: column value is text, not bytea"):
            open_store(postgres_url, **kwargs)


def test_rows_a_row_security_policy_hides_are_an_error_not_missing(
        postgres_url: str, postgres_server: str, reader_role: str) -> None:
    """A policy filtered a reader's rows: verify said all verified, recover unknown handle."""
    from caveman_batch import cli

    schema = postgres_url.rsplit("%3D", 1)[1]
    with open_store(postgres_url) as store:
        hidden, _ = ccr.store_originals(store, [b"hidden original", b"seen original"])
    with admin(postgres_server) as conn:  # type: ignore[attr-defined]
        conn.execute(f"ALTER TABLE {schema}.caveman_ccr ENABLE ROW LEVEL SECURITY")
        digest = hidden[len("ccr_"):]  # (hex: safe in the statement, which takes no parameter)
        conn.execute(f"CREATE POLICY hide ON {schema}.caveman_ccr "
                     f"USING (key <> convert_to('{digest}', 'UTF8'))")
    assert cli.main(["verify", "--store", reader_role]) == 2
    assert cli.main(["recover", hidden, "--store", reader_role]) == 2
