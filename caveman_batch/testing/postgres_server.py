"""A throwaway PostgreSQL cluster for tests and benchmarks: initdb in a temporary folder,
a server listening on a Unix socket in that folder (and, when asked, on TCP loopback at a
free port), trust authentication, removed when stopped. Run as root (CI), the server runs as an unprivileged user (initdb refuses
root): the folder is handed to that user and every command runs through `runuser` (found on
PATH, else in /usr/sbin or /sbin, where Debian keeps it off an unprivileged user's PATH).

    with Cluster.start_new() as cluster:
        url = cluster.url("postgres")      # postgresql://postgres@/postgres?host=...
    with Cluster.start_new(tcp=True) as cluster:
        url = cluster.url(tcp=True)        # postgresql://postgres@127.0.0.1:PORT/postgres

Nothing here reads the environment: the caller says which binaries and which user.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Final

SUPERUSER: Final = "postgres"
PORT: Final = 5432  # only names the socket file: each cluster has its own socket folder
LOOPBACK: Final = "127.0.0.1"
_START_TIMEOUT_S: Final = 60
# where runuser lies when PATH does not name it (util-linux installs it in /usr/sbin)
_SBIN: Final = "/usr/sbin:/sbin"


def find_bindir() -> Path | None:
    """The folder holding initdb and pg_ctl: on PATH, else Debian's newest version."""
    on_path = shutil.which("pg_ctl")
    if on_path and shutil.which("initdb"):
        return Path(os.path.realpath(on_path)).parent
    versions = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"),
                      key=lambda p: int(Path(p).parts[-3]) if Path(p).parts[-3].isdigit() else 0)
    return Path(versions[-1]).parent if versions else None


def find_runuser() -> str | None:
    """The runuser command: on PATH, else in /usr/sbin or /sbin."""
    return shutil.which("runuser") or shutil.which("runuser", path=_SBIN)


def _runuser(run_as: str) -> str:
    found = find_runuser()
    if found is None:
        raise FileNotFoundError(f"no runuser (util-linux) on PATH or in {_SBIN} to run the "
                                f"PostgreSQL server as {run_as}")
    return found


def cannot_start() -> str | None:
    """Why no cluster can be started here (None: one can): no server binaries, or run as
    root without runuser to run them as another user."""
    if find_bindir() is None:
        return "no PostgreSQL server binaries (initdb, pg_ctl) found"
    if os.geteuid() == 0 and find_runuser() is None:
        return "run as root, and no runuser (util-linux) to run the PostgreSQL server as another user"
    return None


class Cluster:
    """One cluster in its own folder: data/, the socket, the server log."""

    def __init__(self, root: Path, bindir: Path, run_as: str | None, port: int = PORT,
                 tcp: bool = False) -> None:
        self.root = root
        self.bindir = bindir
        self.run_as = run_as
        self.port = port  # the TCP port when `tcp`; else it only names the socket file
        self.tcp = tcp
        self.data = root / "data"
        self.log = root / "server.log"

    @classmethod
    def create(cls, bindir: Path | None = None, run_as: str | None = None,
               settings: dict[str, str] | None = None, tcp: bool = False) -> Cluster:
        """initdb a new cluster (not started). As root, `run_as` (default: postgres,
        else nobody) owns and runs it. With `tcp` it also listens on 127.0.0.1 at a port
        free when it is made (the socket file is then named by that port too)."""
        found = bindir or find_bindir()
        if found is None:
            raise FileNotFoundError("no PostgreSQL server binaries (initdb, pg_ctl) found")
        if os.geteuid() == 0 and run_as is None:
            run_as = SUPERUSER if _user_exists(SUPERUSER) else "nobody"
        if run_as is not None:
            _runuser(run_as)  # (before any folder is made)
        root = Path(tempfile.mkdtemp(prefix="caveman-pg-"))
        cluster = cls(root, found, run_as, _free_port() if tcp else PORT, tcp)
        if run_as is not None:
            entry = pwd.getpwnam(run_as)
            os.chown(root, entry.pw_uid, entry.pw_gid)
        try:
            cluster._run("initdb", "-D", str(cluster.data), "-U", SUPERUSER, "--auth=trust",
                         "-E", "UTF8", "--locale=C", "--no-instructions")
            listen = f"'{LOOPBACK}'" if tcp else "''"
            conf = {"listen_addresses": listen, "unix_socket_directories": f"'{root}'",
                    "port": str(cluster.port), "max_connections": "100", "shared_buffers": "32MB",
                    "log_min_messages": "warning", **(settings or {})}
            with open(cluster.data / "postgresql.conf", "a") as fh:
                fh.writelines(f"{k} = {v}\n" for k, v in conf.items())
        except BaseException:
            cluster.remove()
            raise
        return cluster

    @classmethod
    @contextlib.contextmanager
    def start_new(cls, bindir: Path | None = None, run_as: str | None = None,
                  settings: dict[str, str] | None = None, tcp: bool = False) -> Iterator[Cluster]:
        cluster = cls.create(bindir, run_as, settings, tcp)
        try:
            cluster.start()
            yield cluster
        finally:
            cluster.remove()

    def url(self, dbname: str = "postgres", user: str = SUPERUSER, tcp: bool = False) -> str:
        """The URL over the Unix socket, or over TCP loopback (`tcp`: made with tcp=True)."""
        if tcp:
            if not self.tcp:
                raise ValueError("this cluster listens on its Unix socket only (create(tcp=True))")
            return f"postgresql://{user}@{LOOPBACK}:{self.port}/{dbname}"
        host = urllib.parse.quote(str(self.root), safe="")
        return f"postgresql://{user}@/{dbname}?host={host}&port={self.port}"

    def start(self) -> None:
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.log), "-w",
                  "-t", str(_START_TIMEOUT_S), "start")

    def stop(self, mode: str = "fast") -> None:
        self._run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "stop")

    def running(self) -> bool:
        done = self._run("pg_ctl", "-D", str(self.data), "status", check=False)
        return done.returncode == 0

    def remove(self) -> None:
        """Stop the server (if it runs) and delete the folder."""
        if (self.data / "postmaster.pid").exists():
            with contextlib.suppress(subprocess.CalledProcessError):
                self.stop("immediate")
        shutil.rmtree(self.root, ignore_errors=True)

    def _run(self, tool: str, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        command = [str(self.bindir / tool), *args]
        if self.run_as is not None:
            command = [_runuser(self.run_as), "-u", self.run_as, "--", *command]
        done = subprocess.run(command, capture_output=True, text=True, cwd=self.root)
        if check and done.returncode != 0:
            log = self.log.read_text(errors="replace")[-2000:] if self.log.exists() else ""
            raise subprocess.CalledProcessError(done.returncode, command,
                                                done.stdout, done.stderr + log)
        return done


def _free_port() -> int:
    """A loopback port nobody listens on now (another could take it before the server
    starts: then the start fails and says so)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((LOOPBACK, 0))
        return int(probe.getsockname()[1])


def _user_exists(name: str) -> bool:
    try:
        pwd.getpwnam(name)
    except KeyError:
        return False
    return True





def with_schema(url: str, schema: str) -> str:
    """`url` with the session's search_path set to `schema` (libpq's `options` parameter):
    a store of its own in a shared database."""
    joiner = "&" if "?" in url else "?"
    return f"{url}{joiner}options=-csearch_path%3D{schema}"


@contextlib.contextmanager
def fresh_schema(admin_url: str, prefix: str = "t") -> Iterator[str]:
    """A new empty schema in the database `admin_url` names; yields the URL of a store
    there (not yet made: the first open with create makes its table). Dropped after."""
    import secrets

    import psycopg

    schema = f"{prefix}_{secrets.token_hex(6)}"
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    try:
        yield with_schema(admin_url, schema)
    finally:
        with psycopg.connect(admin_url, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA {schema} CASCADE")


def as_user(url: str, user: str) -> str:
    """`url` logging in as `user` (no password: the test clusters trust local sockets)."""
    scheme, _, location = url.partition("://")
    body, sep, query = location.partition("?")
    slash, at = body.find("/"), body.find("@")
    if at != -1 and (slash == -1 or at < slash):
        body = body[at + 1:]
    return f"{scheme}://{user}@{body}{sep}{query}"


__all__ = ["Cluster", "SUPERUSER", "as_user", "cannot_start", "find_bindir", "find_runuser",
           "fresh_schema", "with_schema"]
