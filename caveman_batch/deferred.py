"""The deferred proxy: the client lists a search tool, not every tool of every server.

`caveman-batch proxy --deferred` stands between an MCP client and one upstream (tools
under their own names) or many (`--servers FILE`, tools as `NAME__tool`). It is the
client of each upstream: it forwards the client's `initialize` params to each, sends
their `initialized` itself, fetches their `tools/list` (every page), commits each tool
object's exact bytes to the CCR store, compresses it and indexes it (an in-memory
`ToolIndex`: hybrid, BM25 and dense vectors, when the embed extra is installed, as
`search` ranks; `Settings.embed` as `--embed/--no-embed`). The client's own `tools/list` gets `search_tools`, `call_tool`, the
`--always` tools and whatever searches have found since (each search that finds a new
tool sends `notifications/tools/list_changed`). A `tools/call` of any upstream tool goes
to its upstream unchanged but for its id (and, with several, the name's prefix), listed
or not; `call_tool` does the same for clients that only call listed tools. So with one
upstream a tool of its own named `search_tools` or `call_tool` keeps that name, and the
proxy's tool takes another (`search_tools_proxy`, see `free_name`), with a warning.

The start waits for each upstream's tools for `Settings.start_wait`, counted from the
client's `initialize`. An initialize every upstream refuses gets the (first) refusal, and
the upstreams wait for the client's next try; one that refuses while another accepts is
let go. A late one (the start went on without it) holds the client's requests routed to
it until it has answered initialize and been sent `initialized` (MCP allows none but a
ping before).

Every message the proxy forwards keeps its bytes but for the member it must change:
see `rpc`. Ids: the proxy numbers its requests to each upstream itself, and its requests
to the client (an upstream's sampling, roots, elicitation) in one more sequence, and maps
responses and cancellations back. An upstream that dies fails its in-flight calls with
a JSON-RPC error, its requests to the client are cancelled, its tools leave the search
and the list; the others carry on. With one upstream the proxy ends when it does.

Threads only read (the client's stdin, each upstream's stdout and stderr) and post
lines to one queue; one thread, this module's `DeferredProxy.loop`, owns every piece of
state, the index and every write, so there are no locks.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Container, Iterable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Final, TextIO

from . import __version__, ccr, listing, rpc
from .catalog import Options, compress
from .embedding import Embedder, choose_embedder
from .errors import SearchIndexError, StoreError, UpstreamExited, UsageError
from .proxy import exit_status, open_or_warn, warn
from .store import Store
from .toolsearch import ToolDoc, ToolIndex, split_name
from .toolspans import ToolEntry, index_entries
from .upstreams import (
    MAX_EVENTS,
    MAX_UNWRITTEN,
    SEPARATOR,
    STOP_GRACE,
    Events,
    ServerSpec,
    Upstream,
    pump_lines,
    start_thread,
    stop_all,
)

SEARCH_TOOL: Final = "search_tools"
CALL_TOOL: Final = "call_tool"
DEFAULT_LIMIT: Final = 5
MAX_LIMIT: Final = 20
# Found tools stay listed; past this many the oldest found leaves the list (not the search).
MAX_FOUND: Final = 50
MAX_PAGES: Final = 1000  # of one upstream's tools/list: a cursor that never ends stops here
# the client's requests a late upstream holds until it initializes (and upstreams.MAX_UNWRITTEN
# bytes of them, as one that does not read): past either, a request to it fails at once
MAX_HELD: Final = 1024
DEFAULT_STARTUP_TIMEOUT: Final = 60.0  # one upstream: the client would wait for it alone
# several: one that hangs must not hold the others' start past a client's own timeout
# (the TypeScript SDK's requests give up after 60 s); a late one joins when it lists
DEFAULT_SERVERS_STARTUP_TIMEOUT: Final = 15.0
# how long the dispatcher waits for an upstream whose output ended to exit (a thread stops
# one that lingers: every other upstream is served meanwhile)
EXIT_WAIT: Final = 0.2
# after a signal forwarded to the upstreams, the proxy ends once they have, or after
# upstreams.STOP_GRACE (each one left is then stopped: stop_all, stop_signals)
_FORWARDED_SIGNALS: Final = (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)

STARTING, LISTED, DEAD = "starting", "listed", "dead"


# -- the catalog of one upstream -----------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ListedTool:
    """An upstream tool as the client may see it."""

    server: str
    name: str  # as the upstream lists it
    exposed: str  # as the client sees it: `name`, or `server__name`
    definition: str  # compressed (the original minified, without a store), exposed name
    handle: str | None  # of the tool object's exact original bytes


@dataclass(slots=True)
class Catalog:
    tools: dict[str, ListedTool] = field(default_factory=dict)  # by upstream name, in order
    docs: list[ToolDoc] = field(default_factory=list)
    originals: list[ccr.Prepared] = field(default_factory=list)
    left_out: list[str] = field(default_factory=list)  # names of tools it could not read
    why: dict[str, str] = field(default_factory=dict)  # why, for those a client would refuse
    twice: list[str] = field(default_factory=list)  # names listed again (the first is served)


def build_catalog(server: str, prefix: str, pages: Iterable[bytes], *, compressed: bool,
                  options: Options) -> Catalog:
    """One upstream's tools from its tools/list results' exact bytes; pure (nothing committed).

    Each page goes through the catalog compressor whole and is split into tools as
    `compress --index` splits a catalog (`toolspans.index_entries`), so a tool gets the
    same definition and search text here as in a bulk index. Without `compressed` the
    definitions are the originals, minified. A page the compressor cannot read as a
    catalog is read again tool by tool, each as a page of its own, so that one tool it
    cannot read (a lone surrogate, a NaN) leaves out that tool alone, named in
    `left_out`; a left-out tool may still be called.
    """
    catalog = Catalog()
    for page in pages:
        entries = _page_entries(page, compressed, options)
        if entries is None:
            entries = []
            for tool in _page_tools(page):
                one = _page_entries(b'{"tools":[' + tool + b"]}", compressed, options)
                if one:
                    entries += one
                else:
                    catalog.left_out.append(_tool_name(tool))
        for entry in entries:
            if not entry.name:
                continue
            if entry.name in catalog.tools:  # (the first is served; a call reaches the server)
                catalog.twice.append(entry.name)
                continue
            exposed = prefix + entry.name
            definition = _renamed(entry.definition, exposed)
            refused = None if definition is None else _refused(definition)
            if definition is None or refused is not None:
                catalog.left_out.append(entry.name)
                if refused is not None:
                    catalog.why[entry.name] = refused
                continue
            prepared = ccr.prepare(entry.original) if compressed else None
            handle = prepared.handle if prepared is not None else None
            catalog.tools[entry.name] = ListedTool(server, entry.name, exposed, definition,
                                                   handle)
            # with several servers the client sees NAME__tool: the server's name is searched
            # with the tool's, so a query naming it (or the name as exposed) finds the tool
            fields = entry.fields if not prefix else {
                **entry.fields, "name": f"{split_name(server)} {entry.fields.get('name', '')}"}
            catalog.docs.append(ToolDoc(server, entry.name, handle, entry.definition, fields))
            if prepared is not None:
                catalog.originals.append(prepared)
    return catalog


def _page_entries(page: bytes, compressed: bool, options: Options) -> list[ToolEntry] | None:
    out = compress(page, options)[0] if compressed else page
    found = index_entries(page, out)
    return None if found is None else found[1]


def _page_tools(page: bytes) -> list[bytes]:
    """The exact bytes of each element of a tools/list result's `tools`, by rpc's walker,
    which takes what the compressor does not (a NaN, a lone surrogate's escape)."""
    try:
        text = page.decode("utf-8")
    except UnicodeDecodeError:
        return []
    members = rpc.member_spans(text, (len(text) - len(text.lstrip()), len(text))) or {}
    spans = rpc.element_spans(text, members["tools"]) if "tools" in members else None
    return [text[start:end].encode("utf-8") for start, end in spans or ()]


def _tool_name(tool: bytes) -> str:
    try:
        name = json.loads(tool).get("name")
    except (ValueError, AttributeError, RecursionError):
        name = None
    return name if isinstance(name, str) else "(without a name)"


def _refused(definition: str) -> str | None:
    """Why a client would refuse this tool in a tools/list, or None: MCP's Tool (the Python
    SDK's model, the TypeScript SDK's schema) needs an inputSchema object of type "object",
    a string (or no) description and title, objects (or none) for outputSchema (of type
    "object"), annotations (hints true or false), _meta and execution, and icons with a src.
    The SDKs validate the whole list, so one such tool made a client refuse every server's
    tools and the proxy's own."""
    try:
        tool = json.loads(definition)
    except (ValueError, RecursionError):
        return "is not JSON a client can read"
    if not isinstance(tool, dict):
        return "is not a JSON object"
    schema = tool.get("inputSchema")
    if not isinstance(schema, dict):
        return "has no inputSchema object (MCP requires one)"
    if schema.get("type") != "object":
        return 'has an inputSchema whose type is not "object" (MCP requires it)'
    for key in ("description", "title"):
        if not isinstance(tool.get(key), str | None):
            return f"has a {key} that is not a string"
    for key in ("outputSchema", "annotations", "_meta", "execution"):
        if not isinstance(tool.get(key), dict | None):
            return f"has an {key} that is not an object"
    output = tool.get("outputSchema")
    if output is not None and output.get("type") != "object":
        return 'has an outputSchema whose type is not "object" (MCP requires it)'
    notes = tool.get("annotations") or {}
    if not isinstance(notes.get("title"), str | None):
        return "has an annotations title that is not a string"
    for hint in ("readOnlyHint", "destructiveHint", "idempotentHint", "openWorldHint"):
        if not isinstance(notes.get(hint), bool | None):
            return f"has an annotations {hint} that is not true or false"
    icons = tool.get("icons")
    if icons is not None and not (isinstance(icons, list) and all(
            isinstance(icon, dict) and isinstance(icon.get("src"), str) for icon in icons)):
        return "has icons that are not a list of objects with a src"
    return None


def _renamed(definition: str, exposed: str) -> str | None:
    """The definition with `exposed` for its name, spliced in (the rest as written: a key
    given twice deeper in, which the compressor passes through, stays as it is); None if
    its own keys give one twice (which name is meant cannot be told)."""
    members = rpc.member_spans(definition, (0, len(definition)))
    if members is None or "name" not in members:
        return None
    name = members["name"]
    if json.loads(definition[slice(*name)]) == exposed:
        return definition
    return rpc.splice(definition, name, rpc.dumps(exposed))


# -- the proxy's own tools ------------------------------------------------------------------


def search_tool_definition(servers: Sequence[str], name: str = SEARCH_TOOL,
                           call: str = CALL_TOOL) -> str:
    among = f" of {', '.join(servers)}" if len(servers) > 1 else ""
    return rpc.dumps({
        "name": name,
        "description": f"Find the tools{among} that do what you need. Returns the best "
                       "matches' definitions; each one found is then listed, to call "
                       f"directly or through {call}.",
        "inputSchema": {"type": "object", "properties": {
            "query": {"type": "string", "description": "What the tool should do, in words"},
            "limit": {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT,
                      "default": DEFAULT_LIMIT}},
            "required": ["query"]}})


def call_tool_definition(name: str = CALL_TOOL, search: str = SEARCH_TOOL) -> str:
    return rpc.dumps({
        "name": name,
        "description": f"Call a tool that {search} found, by its name, with its arguments.",
        "inputSchema": {"type": "object", "properties": {
            "name": {"type": "string"},
            "arguments": {"type": "object", "description": "As the tool's inputSchema says"}},
            "required": ["name"]}})


def free_name(base: str, taken: Container[str]) -> str:
    """`base`, or the first of base_proxy, base_proxy_2, ... that `taken` does not hold."""
    if base not in taken:
        return base
    name, n = f"{base}_proxy", 1
    while name in taken:
        n += 1
        name = f"{base}_proxy_{n}"
    return name


def _tool_result(text: str, *, error: bool = False, meta: dict[str, Any] | None = None) -> str:
    result: dict[str, Any] = {"content": [{"type": "text", "text": text}]}
    if error:
        result["isError"] = True
    if meta:
        result["_meta"] = {listing.META_KEY: meta}
    return rpc.dumps(result)


# -- state --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Reply:
    """An upstream's response to one of the proxy's requests, or why there is none."""

    message: rpc.Message | None
    failure: str = ""

    @property
    def ok(self) -> bool:
        return self.message is not None and "result" in self.message.spans

    def reason(self) -> str:
        if self.message is None:
            return self.failure
        error = self.message.values.get("error")
        message = error.get("message") if isinstance(error, dict) else None
        return message if isinstance(message, str) else "an error response"


OnReply = Callable[[Reply], None]


@dataclass(frozen=True, slots=True)
class Held:
    """A client's request to an upstream that has not answered initialize yet (_send_call)."""

    msg: rpc.Message
    line_for: Callable[[int], bytes]
    on_reply: OnReply
    sent: list[int]  # its id upstream, once sent (on_reply reads it)


@dataclass(eq=False)
class Server:
    """One upstream, as the dispatcher sees it."""

    up: Upstream
    prefix: str  # in front of each of its tools' names ("" with a single upstream)
    # to be initialized and listed by, before the start stops waiting; set by the client's
    # initialize, which may come at any time
    deadline: float | None = None
    state: str = STARTING
    settled: bool = False  # listed, dead or late: the start no longer waits for it
    init: dict[str, Any] | None = None  # its initialize result
    refusal: Reply | None = None  # its error answer to initialize, while the client's waits
    next_id: int = 1
    calls: dict[int, OnReply] = field(default_factory=dict)
    held: list[Held] = field(default_factory=list)  # until it answers initialize (it is late)
    tools: dict[str, ListedTool] = field(default_factory=dict)
    # the committed originals of its tools' handles, by digest (_durable commits one again)
    originals: dict[str, ccr.Prepared] = field(default_factory=dict)
    pages: list[bytes] = field(default_factory=list)  # tools/list results being read
    fetching: bool = False
    listing: int | None = None  # the id of its tools/list request in flight (_fetch_tools)
    refetch: bool = False  # its list changed while a fetch was in flight
    status: int | None = None  # exit status, once dead

    @property
    def name(self) -> str:
        return self.up.name


@dataclass(frozen=True, slots=True)
class Settings:
    always: tuple[str, ...] = ()
    single: bool = True
    debug: bool = False
    startup_timeout: float | None = None  # None: DEFAULT_STARTUP_TIMEOUT, or with several
    # upstreams DEFAULT_SERVERS_STARTUP_TIMEOUT (see start_wait)
    embed: bool | None = None  # search's dense vectors: True required, False none, None if installed

    @property
    def start_wait(self) -> float:
        """How long the start waits for an upstream to list its tools, in seconds."""
        if self.startup_timeout is not None:
            return self.startup_timeout
        return DEFAULT_STARTUP_TIMEOUT if self.single else DEFAULT_SERVERS_STARTUP_TIMEOUT


class DeferredProxy:
    """The dispatcher: every event from the client and the upstreams, in arrival order."""

    def __init__(self, servers: Sequence[Server], store: Store | None, settings: Settings,
                 events: Events, out_fd: int, err: TextIO,
                 embedder: Embedder | None = None) -> None:
        self.servers = {s.name: s for s in servers}
        self.store = store
        self.settings = settings
        self.events = events
        self.out_fd = out_fd
        self.err = err
        self.options = Options(count_tokens=False)
        self.index = ToolIndex.open(":memory:", embedder=embedder)  # hybrid, as `search`
        self.search_name, self.call_name = SEARCH_TOOL, CALL_TOOL  # see _own_names
        self.search_definition = search_tool_definition([s.name for s in servers])
        self.call_definition = call_tool_definition()
        self.init_request: rpc.Message | None = None
        self.init_answered = False
        self.held: list[rpc.Message] | None = []  # client requests until every upstream settles
        self.client_ready = False  # the client's `initialized` arrived
        self.to_client: list[bytes] = []  # what waits for it
        self.found: dict[str, None] = {}  # exposed names found by searches, oldest first
        self.announced: str | None = None  # the tools/list result the client last knows of
        # a client's requests in flight at upstreams: its id -> [(that upstream, its id
        # there, the progress token the client gave it)] (several, if a client gives one id
        # to a request before the last under it was answered, as MCP says it must not);
        # (the token, that upstream) -> how many of its calls in flight there gave it (a
        # client may give one to two calls)
        self.client_calls: dict[rpc.IdKey, list[tuple[Server, int, rpc.IdKey | None]]] = {}
        self.client_progress: dict[tuple[rpc.IdKey, Server], int] = {}
        self.server_calls: dict[int, tuple[Server, str, rpc.IdKey | None]] = {}
        # (an upstream, its id) -> the ids the client sees of its requests in flight under
        # that id (several, if it gives one id to a request before the last was answered)
        self.server_call_ids: dict[tuple[str, rpc.IdKey | None], list[int]] = {}
        self.next_client_id = 1
        # an upstream's request to the client that asked for progress: the token the client
        # sees (the request's id here) -> (that upstream, its own token as written)
        self.progress: dict[int, tuple[Server, str]] = {}
        self.client_closed = False  # its input ended: answer what it asked, then end
        self.inputs_closed = False  # and every upstream's input has been closed since
        self.done = False
        self.stopping: int | None = None  # the signal forwarded to every upstream
        self.stop_by = 0.0  # when the proxy ends after it, whether or not they have
        self.status = 0

    @property
    def originals(self) -> dict[str, ccr.Prepared]:
        """The committed originals of the tools held now, by digest. Each server holds
        those of its current tools alone: kept here for every list since the start, those
        of an upstream whose tools change as it runs (a count in a description) grew
        without end."""
        return {d: p for s in self.servers.values() for d, p in s.originals.items()}

    # the loop -------------------------------------------------------------------------

    def loop(self) -> None:
        while not self.done:
            try:
                source, line = self.events.get(timeout=self._timeout())
            except queue.Empty:
                pass
            else:
                self._handle(source, line)
            self._expire()
            self._maybe_finish()
            if self.stopping is not None and (
                    all(s.state == DEAD for s in self.servers.values())
                    or time.monotonic() >= self.stop_by):  # (then each is stopped: stop_all)
                self.done, self.status = True, 128 + self.stopping

    def _handle(self, source: str | None, line: bytes | None) -> None:
        try:
            if source is None:
                self._from_client(line) if line is not None else self._client_gone()
            else:
                server = self.servers[source]
                self._from_server(server, line) if line is not None else self._server_gone(server)
        except Exception as exc:  # a bug must not take every upstream down with it
            self._warn(f"internal error on a message from {source or 'the client'}: {exc!r}")

    def _timeout(self) -> float | None:
        waiting = [s.deadline for s in self.servers.values()
                   if not s.settled and s.deadline is not None]
        if self.stopping is not None:
            waiting.append(self.stop_by)
        return max(0.0, min(waiting) - time.monotonic()) if waiting else None

    def _expire(self) -> None:
        now = time.monotonic()
        for server in self.servers.values():
            if not server.settled and server.deadline is not None and now >= server.deadline:
                server.settled = True
                self._warn(f"upstream {server.name!r} did not list its tools within "
                           f"{self.settings.start_wait:g} s: its tools join when it does")
        self._maybe_answer_initialize()
        self._maybe_ready()

    # writing ------------------------------------------------------------------------

    def _send(self, line: bytes) -> None:
        try:
            view = memoryview(line)
            while view:
                view = view[os.write(self.out_fd, view):]
        except OSError:  # the client went away
            self.done = True

    def _notify(self, line: bytes) -> None:
        """A message of our own or an upstream's: only once the client is initialized."""
        if self.client_ready:
            self._send(line)
        else:
            self.to_client.append(line)

    def _warn(self, message: str) -> None:
        warn(self.err, message)

    def _log(self, message: str) -> None:
        if self.settings.debug:
            self._warn(message)

    # requests to upstreams -----------------------------------------------------------

    def _request(self, server: Server, method: str, params_json: str | None,
                 on_reply: OnReply) -> int | None:
        """A request of the proxy's own; its id, or None if `server` is dead (on_reply told)."""
        return self._send_upstream(server, lambda uid: rpc.request(uid, method, params_json),
                                   on_reply)

    def _send_upstream(self, server: Server, line_for: Callable[[int], bytes],
                       on_reply: OnReply) -> int | None:
        if server.state == DEAD:
            on_reply(Reply(None, f"upstream {server.name!r} is not running"))
            return None
        uid = server.next_id
        server.next_id += 1
        server.calls[uid] = on_reply
        if not server.up.send(line_for(uid)):  # exiting, or it no longer reads its input:
            # the call fails now (an upstream that has stopped reading would never answer)
            if server.calls.pop(uid, None) is not None:
                on_reply(Reply(None, f"upstream {server.name!r} is not reading its input (it "
                                     f"is exiting, or {MAX_UNWRITTEN >> 20} MiB already wait "
                                     f"for it)"))
            return None
        return uid

    def _forward(self, msg: rpc.Message, server: Server,
                 changes: Sequence[tuple[rpc.Span, str]] = ()) -> None:
        """A client request to `server`, unchanged but for its id and `changes`."""
        raw_id, key = msg.raw("id"), rpc.id_key(msg.id)
        sent: list[int] = []  # its id upstream, once sent

        def done(reply: Reply) -> None:
            self._close_call(key, server, sent)
            if reply.message is None:
                self._send(rpc.error(raw_id, rpc.UPSTREAM_UNAVAILABLE, reply.failure))
            elif reply.ok and msg.method in listing.LIST_KEYS:
                self._send(rpc.replace(self._listed(reply.message, msg.method), "id", raw_id))
            else:
                self._send(rpc.replace(reply.message, "id", raw_id))

        def line_for(uid: int) -> bytes:
            return rpc.line(rpc.splice_many(msg.text, [(msg.spans["id"], str(uid)), *changes]))

        self._send_call(msg, server, line_for, done, sent)

    def _send_call(self, msg: rpc.Message, server: Server, line_for: Callable[[int], bytes],
                   on_reply: OnReply, sent: list[int]) -> None:
        """The client's request `msg` to `server`, as `line_for` writes it under its id there
        (added to `sent`). An upstream that has not answered initialize (a late one) holds it
        until it has and has been sent `initialized`: MCP allows a client no request but a
        ping before that, and the Python SDK's servers refuse one."""
        if server.init is None and server.refusal is None and server.state != DEAD:
            if (len(server.held) >= MAX_HELD
                    or sum(len(h.msg.text) for h in server.held) > MAX_UNWRITTEN):
                on_reply(Reply(None, f"upstream {server.name!r} has not initialized yet and "
                                     f"{len(server.held):,} requests already wait for it"))
            else:
                server.held.append(Held(msg, line_for, on_reply, sent))
            return
        uid = self._send_upstream(server, line_for, on_reply)
        if uid is not None:
            sent.append(uid)
            self._open_call(msg, server, uid)

    def _fail_held(self, server: Server, failure: str) -> None:
        """Each request `server` held, failed as a call to a dead upstream fails."""
        held, server.held = server.held, []
        for h in held:
            h.on_reply(Reply(None, failure))

    def _open_call(self, msg: rpc.Message, server: Server, uid: int) -> None:
        """The client's request `msg`, sent to `server` as its `uid`: the client may cancel
        it, and until it is answered the progress on it the client asked for is that
        upstream's to report (another's, or one after the answer, is dropped)."""
        key = rpc.id_key(msg.id)
        if key is None:
            return
        meta = msg.params.get("_meta")
        token = rpc.id_key(meta.get("progressToken")) if isinstance(meta, dict) else None
        self.client_calls.setdefault(key, []).append((server, uid, token))
        if token is not None:
            self.client_progress[token, server] = self.client_progress.get((token, server), 0) + 1

    def _close_call(self, key: rpc.IdKey | None, server: Server, sent: Sequence[int]) -> None:
        """The client's request `key`, sent to `server` as `sent` (its one id there, or
        none if it was not sent), answered: forgotten, and its progress token with it."""
        calls = self.client_calls.get(key, []) if key is not None else []
        mine = [call for call in calls if call[0] is server and call[1] in sent]
        for call in mine:
            self._forget_call(key, call)

    def _cancel_calls(self, key: rpc.IdKey | None) -> list[tuple[Server, int]]:
        """The upstream and id of each of the client's requests `key` in flight (one, unless
        the client gave that id twice), forgotten."""
        calls = list(self.client_calls.get(key, [])) if key is not None else []
        for call in calls:
            self._forget_call(key, call)
        return [(server, uid) for server, uid, _ in calls]

    def _forget_call(self, key: rpc.IdKey | None,
                     call: tuple[Server, int, rpc.IdKey | None]) -> None:
        assert key is not None
        calls = self.client_calls[key]
        calls.remove(call)
        if not calls:
            del self.client_calls[key]
        server, _, token = call
        if token is not None:  # (another call in flight there may have given it too)
            if (left := self.client_progress.pop((token, server), 1) - 1) > 0:
                self.client_progress[token, server] = left

    def _listed(self, msg: rpc.Message, method: str) -> rpc.Message:
        """A prompts or resources list as the relay sends it: reduced, its original stored."""
        if self.store is None:
            return msg
        span = msg.spans["result"]
        try:
            rewrite = listing.rewrite_line(msg.text.encode("utf-8"), method,
                                           listing.Response(msg.id, *span), msg.text, self.options)
            ccr.commit(self.store, [rewrite.original])
            return rpc.read(rewrite.content)
        except listing.NotRewritten:
            return msg
        except StoreError as exc:
            self._warn(f"{method}: sent unchanged, the store failed: {exc}")
            return msg
        except Exception as exc:  # a bug must not cost the client its list
            self._warn(f"{method}: sent unchanged, internal error: {exc!r}")
            return msg

    # from the client -----------------------------------------------------------------

    def _from_client(self, line: bytes) -> None:
        if not line.strip():
            return
        try:
            msg = rpc.read(line)
        except rpc.BadMessage as exc:
            self._failed_client_reply(rpc.response_id(rpc.lenient(line)),
                                      f"a line that is not JSON-RPC ({exc})")
            code = rpc.INVALID_REQUEST if isinstance(exc, rpc.InvalidRequest) else rpc.PARSE_ERROR
            self._send(rpc.error("null", code, f"not a JSON-RPC message: {exc}"))
            return
        if msg.is_response:
            self._client_response(msg)
        elif msg.has_id and msg.id is not None and rpc.id_key(msg.id) is None:
            # an id it cannot be answered under (an object, true): JSON-RPC's answer is null
            self._send(rpc.error("null", rpc.INVALID_REQUEST,
                                 "id: a string, a number or null, please"))
        elif msg.method is None:
            if msg.has_id and not self._failed_client_reply(
                    msg.id, "neither a result nor an error"):
                self._send(rpc.error(msg.raw("id"), rpc.INVALID_REQUEST, "no method"))
        elif not msg.has_id:
            self._client_notification(msg)
        elif msg.method == "initialize":
            self._initialize(msg)
        elif msg.method == "ping":
            self._send(rpc.response(msg.raw("id"), "{}"))
        elif self.init_request is None:  # no start to wait for: held, it waited for ever
            self._not_initialized(msg)
        elif self.held is not None and not self._callable_now(msg):
            self.held.append(msg)
        else:
            self._serve(msg)

    def _not_initialized(self, msg: rpc.Message) -> None:
        """A request before the client's initialize (or after a refused one): an error at
        once. The SDK's client probes `server/discover` first, a revision without the
        initialize handshake, and falls back to initialize on an error: the proxy speaks
        the handshake alone, so it answers as a server that does not serve the method."""
        if msg.method == "server/discover":
            self._send(rpc.error(msg.raw("id"), rpc.METHOD_NOT_FOUND,
                                 "server/discover is not served: initialize, please"))
        else:
            self._send(rpc.error(msg.raw("id"), rpc.INVALID_REQUEST,
                                 "not initialized: initialize first"))

    def _callable_now(self, msg: rpc.Message) -> bool:
        """Whether a request need not wait for every upstream to list its tools: a call
        (direct, or through call_tool) of a tool of an upstream that has initialized, whose
        answer is that upstream's alone. A search and the tool list wait (they cover them
        all), and so does everything until the client's initialize is answered."""
        if not self.init_answered or msg.method != "tools/call":
            return False
        name = msg.params.get("name")
        if name == self.call_name:
            args = msg.params.get("arguments")
            name = args.get("name") if isinstance(args, dict) else None
        elif name == self.search_name:
            return False
        route = self._route(name) if isinstance(name, str) else None
        return route is not None and route[0].init is not None and route[0].state != DEAD

    def _release_callable(self) -> None:
        """The held requests that need wait no more (_callable_now) served, in order."""
        if not self.held:
            return
        now = [self._callable_now(m) for m in self.held]
        ready = [m for m, go in zip(self.held, now) if go]
        self.held = [m for m, go in zip(self.held, now) if not go]
        for msg in ready:
            self._serve(msg)

    def _serve(self, msg: rpc.Message) -> None:
        try:
            self._serve_request(msg)
        except Exception as exc:  # a bug: the client gets an error, not a hang
            self._warn(f"internal error serving {msg.method}: {exc!r}")
            self._send(rpc.error(msg.raw("id"), rpc.INTERNAL_ERROR, f"proxy error: {exc!r}"))

    def _serve_request(self, msg: rpc.Message) -> None:
        if msg.method == "tools/list":
            self.announced = self._tools_result(durable=True)
            self._send(rpc.response(msg.raw("id"), self.announced))
        elif msg.method == "tools/call":
            self._call(msg)
        elif self.settings.single:
            self._forward(msg, next(iter(self.servers.values())))
        else:
            self._send(rpc.error(msg.raw("id"), rpc.METHOD_NOT_FOUND,
                                 f"{msg.method} is not served by a proxy of several servers"))

    def _client_response(self, msg: rpc.Message) -> None:
        """The client's answer to an upstream's request: back to it, under its own id."""
        if (ended := self._end_server_call(msg.id)) is None:
            return
        server, raw_id = ended
        if server.state != DEAD:
            server.up.send(rpc.replace(msg, "id", raw_id))

    def _end_server_call(self, uid: Any) -> tuple[Server, str] | None:
        """The upstream and its own id of the request to the client the proxy numbered
        `uid`, forgotten (and the client's progress on it with it); None if none is open."""
        pid = rpc.integer_id(uid)
        if pid is None or (entry := self.server_calls.pop(pid, None)) is None:
            return None
        server, raw_id, key = entry
        pids = self.server_call_ids.get((server.name, key), [])
        if pid in pids:
            pids.remove(pid)
        if not pids:
            self.server_call_ids.pop((server.name, key), None)
        self.progress.pop(pid, None)
        return server, raw_id

    def _failed_client_reply(self, uid: Any, reason: str) -> bool:
        """Whether a client's answer that cannot be forwarded (an id with neither a method,
        a result nor an error; a line `read` refuses) names an upstream's request (`uid`:
        the proxy's own id, or None): that upstream gets an error then, else it waited for
        ever. (An id alone was answered to the client as a request without a method, under
        the proxy's id, which the client may be using for a request of its own.)"""
        if (ended := self._end_server_call(uid)) is None:
            return False
        server, raw_id = ended
        if server.state != DEAD:
            server.up.send(rpc.error(raw_id, rpc.INTERNAL_ERROR,
                                     f"the client answered with {reason}"))
        return True

    def _client_notification(self, msg: rpc.Message) -> None:
        if msg.method == "notifications/initialized":
            self.client_ready = True
            waiting, self.to_client = self.to_client, []
            for line in waiting:
                self._send(line)
        elif msg.method == "notifications/cancelled":
            self._client_cancelled(msg)
        elif msg.method == "notifications/progress":
            self._client_progress(msg)
        else:  # roots/list_changed, ...: every upstream
            for server in self.servers.values():
                if server.state != DEAD and server.init is not None:
                    server.up.send(rpc.line(msg.text))

    def _client_progress(self, msg: rpc.Message) -> None:
        """Progress on an upstream's request (a sampling, say): to that upstream alone,
        under its own token (it reached every upstream, naming another's token)."""
        token = msg.params.get("progressToken")
        pid = rpc.integer_id(token)
        entry = self.progress.get(pid) if pid is not None else None
        params = rpc.member_spans(msg.text, msg.spans["params"])
        if entry is None or params is None or "progressToken" not in params:
            return  # no request of an upstream's asked for it (or a key is given twice)
        server, own = entry
        if server.state != DEAD:
            server.up.send(rpc.line(rpc.splice(msg.text, params["progressToken"], own)))

    def _client_cancelled(self, msg: rpc.Message) -> None:
        key = rpc.id_key(msg.params.get("requestId"))
        cancelled = self._cancel_calls(key)
        for server, uid in cancelled:
            server.calls.pop(uid, None)  # a late answer is dropped: the client gave up on it
            server.up.send(_with_request_id(msg, uid))
        if not cancelled and self.held is not None:
            self.held = [m for m in self.held if rpc.id_key(m.id) != key]
        for server in self.servers.values():  # (held by a late upstream: never sent)
            if key is not None and server.held:
                server.held = [h for h in server.held if rpc.id_key(h.msg.id) != key]

    # initialize -----------------------------------------------------------------------

    def _initialize(self, msg: rpc.Message) -> None:
        if self.init_request is not None:
            self._send(rpc.error(msg.raw("id"), rpc.INVALID_REQUEST, "already initialized"))
            return
        self.init_request = msg
        params = msg.raw("params") if "params" in msg.spans else "{}"
        deadline = time.monotonic() + self.settings.start_wait
        for server in self.servers.values():
            if server.state != DEAD:
                server.deadline, server.settled = deadline, False
            self._request(server, "initialize", params, partial(self._on_initialize, server))
        self._maybe_answer_initialize()

    def _on_initialize(self, server: Server, reply: Reply) -> None:
        if reply.message is None:  # it died: _server_gone has cleaned up
            return
        if not reply.ok:
            self._warn(f"upstream {server.name!r} refused initialize: {reply.reason()}")
            server.refusal, server.deadline = reply, None  # the clock no longer decides for it
            self._fail_held(server, f"upstream {server.name!r} refused initialize: "
                                    f"{reply.reason()}")
            if self.init_answered:  # the others serve the client: this one is of no use
                self._let_go(server)
            self._maybe_answer_initialize()
            return
        result = reply.message.values["result"]
        server.init = result if isinstance(result, dict) else {}
        server.up.send(rpc.notification("notifications/initialized"))
        held, server.held = server.held, []  # (late: the client's requests since, in order)
        for h in held:
            self._send_call(h.msg, server, h.line_for, h.on_reply, h.sent)
        self._fetch_tools(server)
        self._maybe_answer_initialize()
        self._release_callable()  # (calls of its tools held since the client's initialize)

    def _let_go(self, server: Server) -> None:
        server.settled = True
        server.up.close_stdin()  # its EOF follows

    def _maybe_answer_initialize(self) -> None:
        """Answer the client's initialize once every upstream has answered or is late.

        If every running upstream refused it, the client gets the first refusal and may
        try again (with other params): they are kept, none initialized. Otherwise the
        refusers are let go, and the answer is an error only if none initialized and none
        may (a late one joins when it answers: with several, the start goes on without it).
        """
        if self.init_request is None or self.init_answered:
            return
        servers = list(self.servers.values())
        if not all(s.init is not None or s.settled or s.refusal is not None for s in servers):
            return
        raw_id = self.init_request.raw("id")
        refusals = [s.refusal for s in servers if s.refusal is not None]
        if refusals and all(s.refusal is not None or s.state == DEAD for s in servers):
            self._refused(raw_id, refusals[0])
            return
        self.init_answered = True
        for server in servers:
            if server.refusal is not None:
                self._let_go(server)
        inits = [s.init for s in servers if s.init is not None]
        if not inits and (self.settings.single or all(s.state == DEAD for s in servers)):
            self._send(rpc.error(raw_id, rpc.UPSTREAM_UNAVAILABLE,
                                 "the upstream did not initialize" if self.settings.single
                                 else "no upstream initialized"))
            return
        self._send(rpc.response(raw_id, rpc.dumps(self._init_result(inits))))
        self._release_callable()

    def _refused(self, raw_id: str, refusal: Reply) -> None:
        assert refusal.message is not None
        self._send(rpc.replace(refusal.message, "id", raw_id))
        self.init_request = None  # a next initialize is the client's retry
        for server in self.servers.values():
            server.refusal, server.deadline = None, None
        held, self.held = self.held or [], []  # sent after an initialize that failed
        for msg in held:
            self._send(rpc.error(msg.raw("id"), rpc.INVALID_REQUEST,
                                 "not initialized: initialize was refused"))

    def _init_result(self, inits: list[dict[str, Any]]) -> dict[str, Any]:
        versions = [i["protocolVersion"] for i in inits if isinstance(i.get("protocolVersion"), str)]
        requested = self.init_request.params.get("protocolVersion") if self.init_request else None
        # dated: the oldest is the common one; one that is no date ("1.0") sorted before
        # them all, and the client, which knows dated versions alone, refused every server
        dated = [v for v in versions if _DATED.fullmatch(v)]
        version = min(dated or versions) if versions else requested
        if self.settings.single:
            upstream = inits[0]
            given = upstream.get("capabilities")  # (a list of pairs, a string: none)
            capabilities = dict(given) if isinstance(given, dict) else {}
            tools = capabilities.get("tools")
            capabilities["tools"] = {**(tools if isinstance(tools, dict) else {}),
                                     "listChanged": True}
            result = {"protocolVersion": version, "capabilities": capabilities,
                      "serverInfo": upstream.get("serverInfo") or _SERVER_INFO}
            if isinstance(upstream.get("instructions"), str):
                result["instructions"] = upstream["instructions"]
            return result
        result = {"protocolVersion": version, "capabilities": {"tools": {"listChanged": True}},
                  "serverInfo": _SERVER_INFO}
        notes = [f"{s.name}: {s.init['instructions']}" for s in self.servers.values()
                 if s.init is not None and isinstance(s.init.get("instructions"), str)]
        if notes:
            result["instructions"] = "\n\n".join(notes)
        return result

    # listing an upstream's tools ------------------------------------------------------------

    def _fetch_tools(self, server: Server, cursor: str | None = None) -> None:
        if cursor is None:
            if server.fetching:
                server.refetch = True
                return
            server.fetching, server.pages = True, []
        params = None if cursor is None else rpc.dumps({"cursor": cursor})
        server.listing = self._request(server, "tools/list", params,
                                       partial(self._on_tools_page, server))

    def _on_tools_page(self, server: Server, reply: Reply) -> None:
        if reply.message is None and server.state == DEAD:  # _server_gone has cleaned up
            return
        # (a request it could not take, not reading its input, fails as an error answer
        # does: left fetching, the proxy never listed it again)
        if reply.ok:
            assert reply.message is not None
            result = reply.message.values["result"]
            if not isinstance(result, dict) or not isinstance(result.get("tools"), list):
                self._warn(f"upstream {server.name!r} tools/list answered a result without a "
                           f"list of tools ({_shown(reply.message.raw('result'))}): no tool of "
                           f"that page is in the search")
            server.pages.append(reply.message.raw("result").encode("utf-8"))
            cursor = result.get("nextCursor") if isinstance(result, dict) else None
            if isinstance(cursor, str) and cursor and len(server.pages) < MAX_PAGES:
                self._fetch_tools(server, cursor)
                return
            if isinstance(cursor, str) and cursor:
                self._warn(f"upstream {server.name!r} tools/list still had a next page after "
                           f"{MAX_PAGES:,}: the tools of those read are served, no more")
        elif server.state != LISTED and server.pages:
            self._warn(f"upstream {server.name!r} tools/list failed on page "
                       f"{len(server.pages) + 1}: {reply.reason()}: the tools of the "
                       f"{len(server.pages)} read are served")
        else:
            self._warn(f"upstream {server.name!r} tools/list failed: {reply.reason()}")
        server.fetching = False
        pages, server.pages = server.pages, []
        if reply.ok or server.state != LISTED:  # a failed re-list keeps the tools it had
            self._index(server, pages)  # (a failed first listing, those of the pages read)
        if server.refetch:
            server.refetch = False
            self._fetch_tools(server)

    def _index(self, server: Server, pages: list[bytes]) -> None:
        try:
            catalog = self._catalog(server, pages)
        except Exception as exc:  # a bug: the server is listed with no tools, not left waiting
            self._warn(f"upstream {server.name!r}: its tools could not be read (internal "
                       f"error: {exc!r}): none is in the search (a call still goes)")
            catalog = Catalog()
        for name in dict.fromkeys(catalog.twice):
            self._warn(f"upstream {server.name!r}: tool {name!r} is listed more than once: the "
                       "first is served")
        for name in catalog.left_out:
            why = catalog.why.get(name, "cannot be read as a catalog tool")
            self._warn(f"upstream {server.name!r}: tool {name!r} {why}: left out of the search "
                       "and the list (a call of it still goes)")
        try:
            self.index.replace_server(server.name, catalog.docs)
        except SearchIndexError as exc:
            self._warn(f"upstream {server.name!r}: its tools could not be indexed: {exc}")
            return
        server.tools, server.state, server.settled = catalog.tools, LISTED, True
        server.originals = {p.digest: p for p in catalog.originals}
        self._log(f"upstream {server.name!r}: {len(catalog.tools)} tools indexed")
        self._own_names(server)
        self._maybe_ready()
        self._tools_changed()

    def _own_names(self, server: Server) -> None:
        """With one upstream its tools keep their names, so one of its own named like a
        proxy tool would be hidden by it: the proxy's tool takes another name instead
        (`free_name`), and a call by that name reaches the upstream's, as any call does."""
        if not self.settings.single:
            return  # NAME__tool is never a proxy tool's name
        search, call = free_name(SEARCH_TOOL, server.tools), free_name(CALL_TOOL, server.tools)
        if (search, call) == (self.search_name, self.call_name):
            return
        for base, name in ((SEARCH_TOOL, search), (CALL_TOOL, call)):
            if name != base:
                self._warn(f"upstream {server.name!r} has a tool named {base!r}: the proxy's "
                           f"own is {name!r}")
        self.search_name, self.call_name = search, call
        self.search_definition = search_tool_definition([server.name], search, call)
        self.call_definition = call_tool_definition(call, search)

    def _catalog(self, server: Server, pages: list[bytes]) -> Catalog:
        """Compressed, its originals committed first; without a store, the originals."""
        if self.store is not None:
            catalog = build_catalog(server.name, server.prefix, pages, compressed=True,
                                    options=self.options)
            try:
                ccr.commit(self.store, catalog.originals)
                return catalog
            except StoreError as exc:
                self._warn(f"upstream {server.name!r}: tools listed uncompressed, the store "
                           f"failed: {exc}")
        return build_catalog(server.name, server.prefix, pages, compressed=False,
                             options=self.options)

    def _durable(self, tools: Sequence[ListedTool]) -> dict[str, str]:
        """The handles of these tools, each refreshed in the store as it is handed out (a
        proxy may run for longer than `prune --not-seen-for`: a handle it gives must still
        recover), any the store has lost committed again from the original in hand; none
        if the store fails (the tools go without their handles)."""
        handles = {t.exposed: t.handle for t in tools if t.handle}
        if not handles or self.store is None:
            return handles
        digests = sorted({h[len(ccr.HANDLE_PREFIX):] for h in handles.values()})
        try:
            absent = ccr.touch_held(self.store, digests)
            if absent:
                stamp = time.time_ns() // 1_000_000
                ccr.commit(self.store, [ccr.restamped(self.originals[d], stamp, stamp)
                                        for d in absent])
        except StoreError as exc:
            self._warn(f"tool handles left out, the store failed: {exc}")
            return {}
        return handles

    def _maybe_ready(self) -> None:
        if self.held is None or not self.init_answered:
            return
        if not all(s.settled for s in self.servers.values()):
            return
        held, self.held = self.held, None
        missing = [n for n in self.settings.always if self._tool(n) is None]
        if missing:
            self._warn(f"--always names no tool of a running upstream: {', '.join(missing)}")
        for msg in held:
            self._serve(msg)

    # the list the client sees ---------------------------------------------------------

    def _tool(self, exposed: str) -> ListedTool | None:
        route = self._route(exposed)
        if route is None:
            return None
        server, name = route
        return server.tools.get(name)

    def _route(self, exposed: str) -> tuple[Server, str] | None:
        """The upstream and the name it knows a tool by, from the name the client uses."""
        if self.settings.single:
            return next(iter(self.servers.values())), exposed
        prefix, sep, name = exposed.partition(SEPARATOR)
        server = self.servers.get(prefix)
        return (server, name) if sep and name and server is not None else None

    def _exposed(self) -> list[ListedTool]:
        names = dict.fromkeys([*self.settings.always, *self.found])
        return [t for t in map(self._tool, names) if t is not None]

    def _tools_result(self, durable: bool = False) -> str:
        """The client's tools/list result; `durable`: to send, so its handles are made sure
        of in the store first (_durable)."""
        tools = self._exposed()
        definitions = [self.search_definition, self.call_definition,
                       *(t.definition for t in tools)]
        handles = self._durable(tools) if durable else {t.exposed: t.handle for t in tools
                                                        if t.handle}
        meta = f',"_meta":{rpc.dumps({listing.META_KEY: handles})}' if handles else ""
        return '{"tools":[' + ",".join(definitions) + "]" + meta + "}"

    def _tools_changed(self, *, found: bool = False) -> None:
        """Tell the client its tool list changed: a search found tools, or an upstream's did."""
        if self.announced is None and not found:
            return  # it has not listed yet: what it lists will be current
        current = self._tools_result()
        if found or current != self.announced:
            self.announced = current
            self._notify(rpc.notification("notifications/tools/list_changed"))

    # tools/call ---------------------------------------------------------------------------

    def _call(self, msg: rpc.Message) -> None:
        name = msg.params.get("name")
        if name == self.search_name:
            self._search(msg)
            return
        if name == self.call_name:
            self._call_tool(msg)
            return
        route = self._route(name) if isinstance(name, str) else None
        if route is None:
            self._send(rpc.error(msg.raw("id"), rpc.INVALID_PARAMS, f"unknown tool: {name!r}"))
            return
        server, upstream_name = route
        changes = []
        if upstream_name != name:
            spans = rpc.member_spans(msg.text, msg.spans["params"])
            if spans is None:  # a key twice: the name to rename is not the proxy's to guess
                self._send(rpc.error(msg.raw("id"), rpc.INVALID_PARAMS,
                                     "params: a key is given twice"))
                return
            changes.append((spans["name"], rpc.dumps(upstream_name)))
        self._forward(msg, server, changes)

    def _search(self, msg: rpc.Message) -> None:
        raw_id = msg.raw("id")
        args = msg.params.get("arguments")
        args = args if isinstance(args, dict) else {}
        query, limit = args.get("query"), args.get("limit", DEFAULT_LIMIT)
        if not isinstance(query, str) or not query.strip():
            self._send(rpc.response(raw_id, _tool_result("query: a non-empty string, please",
                                                         error=True)))
            return
        if type(limit) is float and limit.is_integer():  # (JSON Schema's integer: 5.0 is one)
            limit = int(limit)
        if type(limit) is not int or not 1 <= limit <= MAX_LIMIT:
            self._send(rpc.response(raw_id, _tool_result(
                f"limit: an integer from 1 to {MAX_LIMIT}", error=True)))
            return
        hits = self.index.search(query, limit)
        tools = [t for t in (self.servers[h.server].tools.get(h.name) for h in hits) if t]
        text = "[" + ",".join(t.definition for t in tools) + "]" if tools else \
            f"No tool matches {_shown(query)!r}: try other words."
        handles = self._durable(tools)
        self._send(rpc.response(raw_id, _tool_result(text, meta=handles)))
        if self._add_found(t.exposed for t in tools):
            self._tools_changed(found=True)

    def _add_found(self, names: Iterable[str]) -> bool:
        added = False
        for name in names:
            if name not in self.found and name not in self.settings.always:
                self.found[name] = None
                added = True
        while len(self.found) > MAX_FOUND:
            del self.found[next(iter(self.found))]
        return added

    def _call_tool(self, msg: rpc.Message) -> None:
        raw_id = msg.raw("id")
        args = msg.params.get("arguments")
        name = args.get("name") if isinstance(args, dict) else None
        route = self._route(name) if isinstance(name, str) else None
        if route is None:
            self._send(rpc.response(raw_id, _tool_result(
                f"unknown tool {name!r}: {self.search_name} finds tools", error=True)))
            return
        assert isinstance(args, dict)
        if not isinstance(args.get("arguments", {}), dict):
            self._send(rpc.response(raw_id, _tool_result("arguments: an object, please",
                                                         error=True)))
            return
        server, upstream_name = route
        params = _call_params(msg, upstream_name)
        if params is None:
            self._send(rpc.response(raw_id, _tool_result("a key is given twice: each once, please",
                                                         error=True)))
            return
        key = rpc.id_key(msg.id)
        sent: list[int] = []  # its id upstream, once sent

        def done(reply: Reply) -> None:
            self._close_call(key, server, sent)
            if reply.ok:
                assert reply.message is not None
                self._send(rpc.replace(reply.message, "id", raw_id))
            else:
                self._send(rpc.response(raw_id, _tool_result(
                    f"{name} failed: {reply.reason()}", error=True)))

        self._send_call(msg, server, lambda uid: rpc.request(uid, "tools/call", params), done,
                        sent)

    # from an upstream -------------------------------------------------------------------------

    def _from_server(self, server: Server, line: bytes) -> None:
        if not line.strip():
            return
        try:
            msg = rpc.read(line)
        except rpc.BadMessage as exc:
            self._unreadable(server, line, str(exc))
            return
        if not rpc.strict(msg.text) and not self._listing(server, msg):
            # (a Node client's JSON.parse refuses the line: it waited for the answer until
            # its timeout); a tools/list page is read tool by tool, leaving out that tool
            self._unreadable(server, line, "NaN or Infinity, which is not JSON")
            return
        if msg.is_response:
            uid = rpc.integer_id(msg.id)
            on_reply = server.calls.pop(uid, None) if uid is not None else None
            if on_reply is not None:
                on_reply(Reply(msg))
        elif msg.method is None:  # neither a request nor a response: one with an id still
            if msg.has_id:  # ends the request it names (JSON.stringify drops a result: undefined)
                reason = "an answer with neither a result nor an error"
                self._warn(f"upstream {server.name!r} wrote {reason}: dropped")
                self._unreadable_reply(server, msg.id, reason)
        elif msg.has_id:
            self._server_request(server, msg)
        else:
            self._server_notification(server, msg)

    def _unreadable(self, server: Server, line: bytes, reason: str) -> None:
        self._warn(f"upstream {server.name!r} wrote a line that is not JSON-RPC ({reason}): "
                   "dropped")
        message = rpc.lenient(line)  # (read once: it may be a response or a request)
        self._unreadable_reply(server, rpc.response_id(message), reason)
        request = rpc.request_id(message)
        if request is not None and server.state != DEAD:  # (else it waits for ever)
            server.up.send(rpc.error(request, rpc.INVALID_REQUEST,
                                     f"caveman-batch could not read this request ({reason}): "
                                     "it was not sent to the client"))

    def _listing(self, server: Server, msg: rpc.Message) -> bool:
        """Whether `msg` answers the proxy's tools/list request in flight at `server`."""
        return (msg.is_response and server.listing is not None
                and rpc.integer_id(msg.id) == server.listing)

    def _unreadable_reply(self, server: Server, uid: Any, reason: str) -> None:
        """A response the proxy cannot forward (`uid`: the id it names, or None) still ends
        the request it answers, with an error naming the upstream: else the client would
        wait for it for ever."""
        own = rpc.integer_id(uid)
        on_reply = server.calls.pop(own, None) if own is not None else None
        if on_reply is not None:
            text = f"upstream {server.name!r} answered with a line that is not JSON-RPC ({reason})"
            on_reply(Reply(rpc.read(rpc.error(str(own), rpc.UPSTREAM_UNAVAILABLE, text))))

    def _server_request(self, server: Server, msg: rpc.Message) -> None:
        if msg.method == "ping":  # the proxy is alive; the client need not be asked
            server.up.send(rpc.response(msg.raw("id"), "{}"))
            return
        if self.client_closed:  # no answer can come
            server.up.send(rpc.error(msg.raw("id"), rpc.UPSTREAM_UNAVAILABLE,
                                     "the client has closed its input"))
            return
        pid = self.next_client_id
        self.next_client_id += 1
        key = rpc.id_key(msg.id)
        self.server_calls[pid] = (server, msg.raw("id"), key)
        self.server_call_ids.setdefault((server.name, key), []).append(pid)
        changes = [(msg.spans["id"], str(pid))]
        token = _progress_token(msg)
        if token is not None:  # the client's progress on it comes back under our id
            self.progress[pid] = (server, msg.text[slice(*token)])
            changes.append((token, str(pid)))
        self._notify(rpc.line(rpc.splice_many(msg.text, changes)))

    def _server_notification(self, server: Server, msg: rpc.Message) -> None:
        if msg.method == "notifications/tools/list_changed":
            if server.init is not None and server.state != DEAD:
                self._fetch_tools(server)
        elif msg.method == "notifications/cancelled":
            key = rpc.id_key(msg.params.get("requestId"))
            for pid in list(self.server_call_ids.get((server.name, key), [])):
                self._end_server_call(pid)  # (the client's progress on it is no one's)
                self._notify(_with_request_id(msg, pid))
        elif msg.method == "notifications/progress":
            token = rpc.id_key(msg.params.get("progressToken"))
            if token is not None and (token, server) in self.client_progress:
                self._notify(rpc.line(msg.text))
            # else it names no call of the client's at this upstream in flight: another
            # upstream's (with --servers, forged on a call it does not serve) or one
            # answered, dropped as the client's SDK would drop it once the call is done
        elif self.settings.single:  # logging, resources and prompts changes, ...
            self._notify(rpc.line(msg.text))
        elif msg.method == "notifications/message":  # whose: each upstream logs as itself
            self._notify(_logged_as(msg, server.name))
        elif msg.method not in _NOT_SERVED:
            self._notify(rpc.line(msg.text))

    # endings ---------------------------------------------------------------------------

    def _client_gone(self) -> None:
        """The client closed its input (it may still read ours): as the relay does, what it
        asked is still answered (_maybe_finish); what upstreams ask of it, no longer."""
        self.client_closed = True
        calls, self.server_calls = self.server_calls, {}
        self.server_call_ids, self.progress = {}, {}
        for server, raw_id, _key in calls.values():
            if server.state != DEAD:
                server.up.send(rpc.error(raw_id, rpc.UPSTREAM_UNAVAILABLE,
                                         "the client has closed its input"))

    def _maybe_finish(self) -> None:
        """Once the client's input has ended: when no request of its waits on an upstream
        that is still starting, each upstream's input is closed (nothing more is sent to
        them), and once no call of the client's is in flight the proxy ends. A call an
        upstream answers as it exits is answered; one that it never answers fails as it
        exits (or the proxy waits, as the relay waits for its upstream's end)."""
        if not self.client_closed or self.done:
            return
        if self.init_request is not None and (not self.init_answered or self.held or any(
                s.held for s in self.servers.values())):
            return  # their answers wait for the upstreams to initialize and list their tools
        if not self.inputs_closed:
            self.inputs_closed = True
            for server in self.servers.values():
                if server.state != DEAD:
                    server.up.close_stdin()
        if not self.client_calls:
            self.done = True

    def _server_gone(self, server: Server) -> None:
        """Its stdout ended, or it exited and nothing more came (a child of its may hold
        its stdout: upstreams.read_lines): it is gone, or going. Fail what waits on it,
        drop its tools. Never waits long for its exit: the others are served meanwhile
        (one that lingers is stopped by a thread)."""
        server.up.close_stdin()
        try:
            server.status = exit_status(server.up.proc.wait(EXIT_WAIT))
        except subprocess.TimeoutExpired:
            server.status = None
            start_thread(server.up.stop, name=f"stop-{server.name}")
        server.state, server.settled = DEAD, True
        ended = ("closed its output (still running: it is being stopped)"
                 if server.status is None else f"exited with status {server.status}")
        said = self.settings.single and bool(server.status)  # (run raises it, by its command)
        if self.stopping is None and not self.inputs_closed and not said:
            self._warn(f"upstream {server.name!r} {ended}"
                       + ("" if self.settings.single else ": its tools are out of the search"))
        failure = (f"upstream {server.name!r} closed its output" if server.status is None
                   else f"upstream {server.name!r} exited (status {server.status})")
        calls, server.calls = server.calls, {}
        for on_reply in calls.values():
            on_reply(Reply(None, failure))
        self._fail_held(server, failure)
        for pid, (owner, _raw, _key) in list(self.server_calls.items()):
            if owner is server:
                self._end_server_call(pid)
                self._notify(rpc.notification("notifications/cancelled", rpc.dumps(
                    {"requestId": pid, "reason": failure})))
        self.index.remove_server(server.name)
        server.tools, server.originals = {}, {}
        self._maybe_answer_initialize()
        if self.settings.single:  # (its status, once it has exited, is run's to return)
            self.done = True
            return
        self._maybe_ready()
        self._tools_changed()


_SERVER_INFO: Final = {"name": "caveman-batch", "version": __version__}
_DATED: Final = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}")  # MCP's protocol versions


def _call_params(msg: rpc.Message, name: str) -> str | None:
    """call_tool's params as the upstream's tools/call: its arguments as written, its _meta;
    None if params or call_tool's arguments give a key twice (which value is meant cannot be
    told, and a call with other arguments than the client's must not be made)."""
    params = rpc.member_spans(msg.text, msg.spans["params"])
    outer = rpc.member_spans(msg.text, params["arguments"]) if params is not None else None
    if params is None or outer is None:
        return None
    arguments = msg.text[slice(*outer["arguments"])] if "arguments" in outer else "{}"
    meta = f',"_meta":{msg.text[slice(*params["_meta"])]}' if "_meta" in params else ""
    return '{"name":' + rpc.dumps(name) + ',"arguments":' + arguments + meta + "}"


def _shown(text: str, most: int = 80) -> str:
    return text if len(text) <= most else text[:most] + "…"


def _progress_token(msg: rpc.Message) -> rpc.Span | None:
    """Where a request's params._meta.progressToken (a string or a number) lies."""
    params = rpc.member_spans(msg.text, msg.spans["params"]) if "params" in msg.spans else None
    meta = rpc.member_spans(msg.text, params["_meta"]) if params and "_meta" in params else None
    if not meta or "progressToken" not in meta:
        return None
    token = meta["progressToken"]
    return token if rpc.id_key(json.loads(msg.text[slice(*token)])) is not None else None


# Notifications about what a proxy of several servers does not serve (it answers resources
# and prompts requests -32601): the client has nothing to refresh, and was not told of them.
_NOT_SERVED: Final = frozenset({"notifications/resources/list_changed",
                                "notifications/resources/updated",
                                "notifications/prompts/list_changed"})


def _logged_as(msg: rpc.Message, server: str) -> bytes:
    """An upstream's log message with its `logger` named after its server ("NAME", or
    "NAME/LOGGER" for a logger of its own), so that with several upstreams the client can
    tell whose it is; the rest as it came. Params that give a key twice are written anew,
    each member's value as written (the last of a key's); params that are not an object
    are `{"logger": NAME}`."""
    logger = msg.params.get("logger")
    named = rpc.dumps(f"{server}/{logger}" if isinstance(logger, str) and logger else server)
    spans = rpc.member_spans(msg.text, msg.spans["params"]) if "params" in msg.spans else None
    if spans is None:
        anew = (rpc.object_with(msg.text, msg.spans["params"], {"logger": named})
                if "params" in msg.spans else None)
        return rpc.notification("notifications/message", anew or '{"logger":' + named + "}")
    if "logger" in spans:
        return rpc.line(rpc.splice(msg.text, spans["logger"], named))
    start = msg.spans["params"][0] + 1  # just inside its brace
    return rpc.line(msg.text[:start] + '"logger":' + named + ("," if spans else "")
                    + msg.text[start:])


def _with_request_id(msg: rpc.Message, request_id: int) -> bytes:
    """A cancellation as it came, its requestId the other side's (`request_id`). Params
    that give a key twice (no spans to splice into) are written anew, each member's value
    as written (the last of each key's, as the id that was looked up)."""
    params = rpc.member_spans(msg.text, msg.spans["params"])
    if params is not None and "requestId" in params:
        return rpc.line(rpc.splice(msg.text, params["requestId"], str(request_id)))
    anew = rpc.object_with(msg.text, msg.spans["params"], {"requestId": str(request_id)})
    return rpc.notification(msg.method or "notifications/cancelled",
                            anew or rpc.dumps({"requestId": request_id}))


# -- running it -----------------------------------------------------------------------------


def _start(specs: Sequence[ServerSpec], settings: Settings, events: Events,
           err: TextIO) -> list[Server]:
    """Every upstream that starts; with several, one that cannot start is left out."""
    servers = []
    for spec in specs:
        try:
            up = Upstream(spec, events, err, prefix_stderr=not settings.single)
        except UsageError as exc:
            if settings.single:
                raise
            err.write(f"caveman-batch proxy: {exc}: left out\n")
            err.flush()
            continue
        servers.append(Server(up, "" if settings.single else spec.name + SEPARATOR))
    return servers


def run(specs: Sequence[ServerSpec], store_url: str | None, settings: Settings, *,
        stdin_fd: int = 0, stdout_fd: int = 1, err: TextIO | None = None) -> int:
    """Serve the client on stdin/stdout until it closes stdin; the exit status.

    With one upstream (`settings.single`) the proxy ends when the upstream does and
    raises UpstreamExited if it failed; with several it ends with the client (0).
    """
    if not specs:
        raise UsageError("proxy --deferred needs an upstream command or --servers FILE")
    if settings.single and len(specs) != 1:
        raise UsageError("a single-upstream proxy takes exactly one upstream")
    err = err or sys.stderr
    embedder = choose_embedder(settings.embed)  # before any upstream starts: --embed without it
    events: Events = queue.Queue(MAX_EVENTS)
    store = open_or_warn(store_url, err, without="tools are listed uncompressed")
    servers: list[Server] = []
    restore: Callable[[], None] = _nothing
    proxy: DeferredProxy | None = None
    try:
        servers = _start(specs, settings, events, err)
        if not servers:  # (each was left out, named: a proxy of none would refuse initialize)
            raise UsageError(f"none of the {len(specs)} servers could start: nothing to proxy")
        proxy = DeferredProxy(servers, store, settings, events, stdout_fd, err, embedder)
        restore = _forward_signals(proxy)
        start_thread(pump_lines, stdin_fd, None, events, name="proxy-client")
        proxy.loop()
    finally:
        restore()
        signalled = proxy.stopping if proxy is not None else None
        for server, status in zip(servers, stop_all([s.up for s in servers], signalled=signalled)):
            server.status = exit_status(status)
        if store is not None:
            store.close()
    if not settings.single:
        return proxy.status
    status = servers[0].status or 0  # its own, as `proxy` without --deferred
    if status:
        raise UpstreamExited(f"upstream {specs[0].argv[0]!r} exited with status {status}", status)
    return 0


def _forward_signals(proxy: DeferredProxy) -> Callable[[], None]:
    """A signal to the proxy goes to every upstream; the proxy ends once they have. What
    puts the previous handlers back (and ends the waker) is returned.

    The handler runs in the dispatcher's thread, between any two of its bytecodes: inside
    the event queue's lock too (a `get` holds it around its wait), which it cannot take
    again. It put its wake-up in the queue itself, and a signal that came there hung the
    proxy for good (its next signals as well). It writes a byte to a pipe instead, which
    takes no lock; a thread of its own posts the wake-up."""
    if threading.current_thread() is not threading.main_thread():
        return _nothing
    wake_read, wake_write = os.pipe()
    os.set_blocking(wake_write, False)
    start_thread(_post_wakes, wake_read, proxy.events, name="proxy-signal")

    def forward(signum: int, _frame: object) -> None:
        proxy.stopping = signum
        for server in proxy.servers.values():
            server.up.signal(signum)
        proxy.stop_by = time.monotonic() + STOP_GRACE
        with contextlib.suppress(OSError):  # (full: a wake-up waits already)
            os.write(wake_write, b"\0")

    previous = {s: signal.signal(s, forward) for s in _FORWARDED_SIGNALS}

    def restore() -> None:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        os.close(wake_write)  # (the waker sees its end of file and ends)

    return restore


def _nothing() -> None:
    pass


def _post_wakes(fd: int, events: Events) -> None:
    """For each byte a signal handler wrote: an empty client line, which wakes the loop
    (and is skipped); none into a full queue (the loop is awake anyway, and one that has
    ended would hold this thread for ever)."""
    try:
        while os.read(fd, 512):
            with contextlib.suppress(queue.Full):
                events.put_nowait((None, b""))
    finally:
        os.close(fd)
