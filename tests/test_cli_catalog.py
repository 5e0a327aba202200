"""The catalog commands (shrink, lint, profile): in-process through cli.main, plus a few
end-to-end runs of the installed `caveman-batch` entry point.

Every test runs with CAVEMAN_* cleared and CAVEMAN_HOME in a tmp dir (conftest), so the
default store is a fresh LMDB under tmp_path.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from caveman_batch import cli, sources
from caveman_batch.catalog import compress
from caveman_batch.profile import profile
from caveman_batch.tokens import count_tokens

F1 = "The output is shown as a friendly table in the terminal window."
F2 = "This is a friendly helper for people who like gardens and flowers."
SEARCH = f"Searches the issues of a repository and returns them as a list. {F1} {F2} Do not use this tool for pull requests."
CUT = ("Returns the current weather report for a city, including wind, rain and sun hours for the "
       f"week ahead. {F1} {F2} The city must be named in full.")
CATALOG = json.dumps({"tools": [
    {"name": "search_issues", "description": SEARCH,
     "inputSchema": {"type": "object", "title": "Args", "properties": {
         "q": {"type": "string", "description": "Query", "examples": ["bug"]},
         "state": {"type": "string", "enum": ["open", "closed"], "default": "open"}}, "required": ["q"]}},
    {"name": "weather", "description": CUT, "inputSchema": {"type": "object"}},
    {"name": "ping", "description": "Checks the server."},
]}, indent=2, ensure_ascii=False).encode() + b"\n"


def run_in_process(argv: list[str]) -> int:
    try:
        return cli.main(argv)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else 1


def entry_point() -> list[str]:
    beside = shutil.which("caveman-batch", path=str(Path(sys.executable).parent))
    return [beside] if beside else [sys.executable, "-m", "caveman_batch"]


def run(*args: str, stdin: bytes = b"") -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([*entry_point(), *args], input=stdin, env=dict(os.environ),
                          capture_output=True, timeout=60, check=False)


def one_report(err: bytes) -> dict[str, object]:
    lines = err.decode().splitlines()
    assert len(lines) == 1, err
    report = json.loads(lines[0])
    assert isinstance(report, dict)
    return report


@pytest.fixture
def catalog(tmp_path: Path) -> Path:
    path = tmp_path / "catalog.json"
    path.write_bytes(CATALOG)
    return path


@pytest.fixture
def store_url(tmp_path: Path) -> str:
    return f"lmdb://{tmp_path}/store.lmdb"


def feed_stdin(monkeypatch: pytest.MonkeyPatch, data: bytes) -> None:
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data)))


# -- shrink, end to end -------------------------------------------------------------


def test_shrink_stdin_then_recover_through_the_entry_point(store_url: str) -> None:
    done = run("shrink", "--store", store_url, stdin=CATALOG)
    assert done.returncode == 0, done.stderr
    assert done.stdout == compress(CATALOG)[0]
    report = one_report(done.stderr)
    assert (report["source"], report["status"], report["store"]) == ("<stdin>", "ok", store_url)
    handle = report["handle"]
    assert isinstance(handle, str) and handle.startswith("ccr_")
    back = run("recover", handle, "--store", store_url)
    assert (back.returncode, back.stdout, back.stderr) == (0, CATALOG, b"")


def test_shrink_file_to_output_through_the_entry_point(catalog: Path, tmp_path: Path) -> None:
    out = tmp_path / "new" / "small.json"
    done = run("shrink", str(catalog), "-o", str(out))  # default store under CAVEMAN_HOME
    assert done.returncode == 0, done.stderr
    assert done.stdout == b""
    assert out.read_bytes() == compress(CATALOG)[0]
    report = one_report(done.stderr)
    assert report["store"] == f"lmdb://{Path(os.environ['CAVEMAN_HOME']) / 'ccr.lmdb'}"
    assert report["source"] == str(catalog) and str(report["handle"]).startswith("ccr_")


def test_oversize_file_refused_by_the_entry_point(tmp_path: Path) -> None:
    huge = tmp_path / "huge.json"
    with open(huge, "wb") as fh:
        fh.truncate(40 << 20)  # sparse: 40 MiB that would take a while to read and parse
    done = run("shrink", str(huge), "--store", f"lmdb://{tmp_path}/never.lmdb")
    assert done.returncode == 1
    assert done.stdout == b""
    assert str(huge).encode() in done.stderr and b"33,554,432 bytes" in done.stderr
    assert not (tmp_path / "never.lmdb").exists()


# -- shrink, in-process ---------------------------------------------------------------


def test_shrink_file(catalog: Path, store_url: str, capfdbinary: pytest.CaptureFixture[bytes]) -> None:
    assert run_in_process(["shrink", str(catalog), "--store", store_url]) == 0
    captured = capfdbinary.readouterr()
    expected, result = compress(CATALOG)
    assert captured.out == expected
    report = one_report(captured.err)
    assert report["status"] == "ok" and report["reason"] is None
    assert (report["tokens_before"], report["tokens_after"]) == (result.tokens_before, result.tokens_after)
    assert (report["bytes_before"], report["bytes_after"]) == (len(CATALOG), len(expected))
    assert (report["shape"], report["tools"], report["encoding"], report["basis"]) == (
        "mcp-tools", 3, "o200k_base", "inferred")
    assert 0 < float(report["ratio"]) < 1  # type: ignore[arg-type]

    assert run_in_process(["recover", "--handle", str(report["handle"]), "--store", store_url]) == 0
    assert capfdbinary.readouterr().out == CATALOG


@pytest.mark.parametrize("argv", [["shrink", "-"], ["shrink"]], ids=["dash", "default"])
def test_shrink_stdin(argv: list[str], store_url: str, monkeypatch: pytest.MonkeyPatch,
                      capfdbinary: pytest.CaptureFixture[bytes]) -> None:
    feed_stdin(monkeypatch, CATALOG)
    assert run_in_process([*argv, "--store", store_url]) == 0
    captured = capfdbinary.readouterr()
    assert captured.out == compress(CATALOG)[0]
    assert one_report(captured.err)["source"] == "<stdin>"


def test_shrink_uses_the_store_from_the_environment(catalog: Path, store_url: str,
                                                    monkeypatch: pytest.MonkeyPatch,
                                                    capfdbinary: pytest.CaptureFixture[bytes]) -> None:
    monkeypatch.setenv("CAVEMAN_CCR_STORE", store_url)
    assert run_in_process(["shrink", str(catalog)]) == 0
    report = one_report(capfdbinary.readouterr().err)
    assert report["store"] == store_url
    assert run_in_process(["recover", str(report["handle"]), "--store", store_url]) == 0
    assert capfdbinary.readouterr().out == CATALOG


def test_shrink_output_file_is_written_whole(catalog: Path, store_url: str, tmp_path: Path,
                                             capfdbinary: pytest.CaptureFixture[bytes]) -> None:
    out = tmp_path / "out" / "catalog.min.json"
    assert run_in_process(["shrink", str(catalog), "-o", str(out), "--store", store_url]) == 0
    captured = capfdbinary.readouterr()
    assert captured.out == b""
    assert out.read_bytes() == compress(CATALOG)[0]
    assert [p.name for p in out.parent.iterdir()] == ["catalog.min.json"]  # no temp file left
    assert str(one_report(captured.err)["handle"]).startswith("ccr_")


def test_output_dash_is_standard_output_and_dot_slash_dash_a_file(
        catalog: Path, store_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capfdbinary: pytest.CaptureFixture[bytes]) -> None:
    """`-o -` (shrink, recover) wrote a file named "-" in the current folder, where nearly
    every Unix tool writes to standard output; `./-` is the way to name such a file."""
    monkeypatch.chdir(tmp_path)
    assert run_in_process(["shrink", str(catalog), "-o", "-", "--store", store_url]) == 0
    captured = capfdbinary.readouterr()
    assert captured.out == compress(CATALOG)[0]
    handle = str(one_report(captured.err)["handle"])
    assert run_in_process(["recover", handle, "--output", "-", "--store", store_url]) == 0
    assert capfdbinary.readouterr().out == CATALOG
    assert not (tmp_path / "-").exists()
    assert run_in_process(["recover", handle, "-o", "./-", "--store", store_url]) == 0
    assert capfdbinary.readouterr().out == b""
    assert (tmp_path / "-").read_bytes() == CATALOG
    assert run_in_process(["shrink", str(catalog), "-o", "./-", "--store", store_url]) == 0
    assert capfdbinary.readouterr().out == b""
    assert (tmp_path / "-").read_bytes() == compress(CATALOG)[0]


@pytest.mark.parametrize("option", ["--manifest", "--changes", "--index"])
def test_compress_refuses_dash_for_the_files_it_keeps(
        catalog: Path, store_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        option: str, capfdbinary: pytest.CaptureFixture[bytes]) -> None:
    """`--manifest -`, `--changes -` and `--index -` wrote a file named "-" here; the
    summary is what goes to standard output. `./-` still names such a file."""
    monkeypatch.chdir(tmp_path)
    argv = ["compress", str(catalog), "-o", "out", "--store", store_url]
    assert run_in_process([*argv, option, "-"]) == 1
    assert f"{option} takes a file" in capfdbinary.readouterr().err.decode()
    assert not (tmp_path / "-").exists() and not (tmp_path / "out").exists()
    assert run_in_process([*argv, option, "./-"]) == 0
    assert (tmp_path / "-").is_file()


def test_shrink_passes_a_bad_catalog_through(tmp_path: Path, store_url: str,
                                             capfdbinary: pytest.CaptureFixture[bytes]) -> None:
    bad = tmp_path / "bad.json"
    bad.write_bytes(b'{"tools": [ {"name": "x",}  ]}')
    assert run_in_process(["shrink", str(bad), "--store", store_url]) == 0
    captured = capfdbinary.readouterr()
    assert captured.out == bad.read_bytes()
    report = one_report(captured.err)
    assert report["status"] == "passthrough" and "invalid JSON" in str(report["reason"])
    assert report["ratio"] == 0.0
    if report["handle"] is not None:  # the original is stored all the same: it must come back
        assert run_in_process(["recover", str(report["handle"]), "--store", store_url]) == 0
        assert capfdbinary.readouterr().out == bad.read_bytes()


@pytest.mark.parametrize("scheme", ["lmdb", "sqlite"])
def test_store_that_cannot_be_opened_passes_the_original_through(
    scheme: str, catalog: Path, tmp_path: Path, capfdbinary: pytest.CaptureFixture[bytes]
) -> None:
    blocker = tmp_path / "a-regular-file"
    blocker.write_bytes(b"")
    url = f"{scheme}://{blocker}/sub/ccr.{'lmdb' if scheme == 'lmdb' else 'db'}"
    code = run_in_process(["shrink", str(catalog), "--store", url])
    captured = capfdbinary.readouterr()
    assert code == 0, captured.err
    assert captured.out == CATALOG  # unchanged: no output may exist without its original stored
    report = one_report(captured.err)
    assert report["handle"] is None and report["status"] == "passthrough"
    assert "store" in str(report["reason"]) and str(blocker) in str(report["reason"])
    assert report["bytes_after"] == report["bytes_before"] == len(CATALOG)
    assert report["tokens_after"] == report["tokens_before"] and report["ratio"] == 0.0


def test_max_bytes_refuses_a_file_before_reading_it(
    catalog: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfdbinary: pytest.CaptureFixture[bytes]
) -> None:
    def never(*args: object, **kwargs: object) -> bytes:
        raise AssertionError("the oversize file was read")

    monkeypatch.setattr(sources, "read_capped", never)
    limit = len(CATALOG) - 1
    store = tmp_path / "never.lmdb"
    assert run_in_process(["shrink", str(catalog), "--max-bytes", str(limit), "--store", f"lmdb://{store}"]) == 1
    captured = capfdbinary.readouterr()
    assert captured.out == b""
    assert f"{catalog}: input is larger than {limit:,} bytes".encode() in captured.err
    assert b"Traceback" not in captured.err and not store.exists()


def test_max_bytes_on_stdin_and_at_the_limit(
    catalog: Path, store_url: str, monkeypatch: pytest.MonkeyPatch, capfdbinary: pytest.CaptureFixture[bytes]
) -> None:
    feed_stdin(monkeypatch, CATALOG)
    assert run_in_process(["shrink", "-", "--max-bytes", "100", "--store", store_url]) == 1
    captured = capfdbinary.readouterr()
    assert captured.out == b"" and b"<stdin>: input is larger than 100 bytes" in captured.err
    exact = str(len(CATALOG))
    assert run_in_process(["shrink", str(catalog), "--max-bytes", exact, "--store", store_url]) == 0
    assert capfdbinary.readouterr().out == compress(CATALOG)[0]
    for command in (["lint", str(catalog)], ["profile", str(catalog)]):
        assert run_in_process([*command, "--max-bytes", "10"]) == 1
        assert b"larger than 10 bytes" in capfdbinary.readouterr().err


def test_missing_file_is_a_user_error(tmp_path: Path, capfdbinary: pytest.CaptureFixture[bytes]) -> None:
    missing = tmp_path / "nope.json"
    for command in ("shrink", "lint", "profile"):
        assert run_in_process([command, str(missing)]) == 1
        err = capfdbinary.readouterr().err
        assert str(missing).encode() in err and b"cannot read" in err


# -- lint ------------------------------------------------------------------------------


def compact_tokens(tool: object) -> int:
    return count_tokens(json.dumps(tool, separators=(",", ":"), ensure_ascii=False))


def test_lint_text(catalog: Path, capfdbinary: pytest.CaptureFixture[bytes]) -> None:
    assert run_in_process(["lint", str(catalog)]) == 0
    text = capfdbinary.readouterr().out.decode()
    before = json.loads(CATALOG)["tools"]
    after = json.loads(compress(CATALOG)[0])["tools"]
    lines = text.splitlines()
    assert lines[0].startswith(f"{catalog}: 3 tools, {count_tokens(CATALOG):,} -> ")
    assert "(o200k_base, inferred)" in lines[0]
    for old, new in zip(before, after):
        b, a = compact_tokens(old), compact_tokens(new)
        assert f"  {old['name']}: {b:,} -> {a:,} tokens" in text
    assert "/tools/0/description: 2 sentence(s) dropped" in text
    assert f"      - {F1}" in text and f"      - {F2}" in text
    assert "/tools/1/description: 2 sentence(s) dropped, lead cut" in text
    assert "/tools/0/inputSchema/title: annotation dropped" in text
    assert "/tools/0/inputSchema/properties/q/examples: annotation dropped" in text
    assert "ping: " in text and "/tools/2/" not in text


def test_lint_cannot_be_made_to_print_a_line_the_catalog_wrote(
        tmp_path: Path, capfdbinary: pytest.CaptureFixture[bytes]) -> None:
    """A property name (in a change's path) or a dropped sentence holding a line break was
    printed raw: a forged line of the report."""
    forged = "x\n  FAKE: 0 bytes"
    catalog = tmp_path / "c.json"
    catalog.write_text(json.dumps({"tools": [{"name": "t", "description": "Lists things.",
                                              "inputSchema": {"type": "object", "properties": {
                                                  forged: {"type": "string", "description":
                                                           "Lists  things.\u001b[2J Also fun."}}}}]}))
    assert run_in_process(["lint", str(catalog)]) == 0
    text = capfdbinary.readouterr().out.decode()
    assert not any(line.startswith("  FAKE") for line in text.splitlines()), text
    assert "x\\n  FAKE" in text and "\x1b" not in text


def test_lint_says_lead_cut_alone_when_only_the_lead_was_cut(
        tmp_path: Path, capfdbinary: pytest.CaptureFixture[bytes]) -> None:
    """(it said "white space folded, lead cut" when nothing was folded)"""
    long = ("Returns the current weather report for the given city together with wind speed, "
            "rain, humidity, air pressure and the hours of sun expected in the coming week "
            "for each of its districts")
    path = tmp_path / "c.json"
    path.write_text(json.dumps({"tools": [{"name": "w", "description": long,
                                           "inputSchema": {"type": "object"}}]}))
    assert run_in_process(["lint", str(path)]) == 0
    text = capfdbinary.readouterr().out.decode()
    assert "/tools/0/description: lead cut" in text and "folded" not in text


@pytest.mark.parametrize(("doc", "pointer"), [
    ({"jsonrpc": "2.0", "id": 1, "result": {"tools": [
        {"name": "s", "description": SEARCH, "inputSchema": {"type": "object"}}]}},
     "/result/tools/0/description"),
    ([{"type": "function", "function": {"name": "s", "description": SEARCH,
                                        "parameters": {"type": "object"}}}],
     "/0/function/description"),
    ({"tools": [{"note": "not a tool"}, {"name": "s", "description": SEARCH,
                                         "inputSchema": {"type": "object"}}]},
     "/tools/1/description"),
    ({"name": "s", "description": SEARCH, "inputSchema": {"type": "object"}}, "/description"),
], ids=["jsonrpc", "openai-tools", "after-a-non-tool", "single-tool"])
def test_lint_names_each_change_by_its_json_pointer(
        tmp_path: Path, capfdbinary: pytest.CaptureFixture[bytes], doc: object, pointer: str) -> None:
    """(it said /tools/<i>/… whatever the shape, counting the tools only)"""
    path = tmp_path / "c.json"
    path.write_text(json.dumps(doc))
    assert run_in_process(["lint", str(path), "--json"]) == 0
    report = json.loads(capfdbinary.readouterr().out)
    assert report["tools"][0]["changes"][0]["path"] == pointer


def _many_tools(count: int) -> bytes:
    return json.dumps({"tools": [
        {"name": f"t{i}", "description": "Does x. Provides detailed feedback and improvement "
         "suggestions.", "inputSchema": {"type": "object", "title": "T", "properties": {
             "a": {"type": "string", "title": "A"}, "b": {"type": "string", "title": "B"}}}}
        for i in range(count)]}).encode()


def test_lint_of_many_tools_takes_linear_time() -> None:
    """Each tool's changes were found by a filter of the whole trace per tool: the square of
    the catalog's size (8,000 tools, 2 MB: 26 s, where shrink took 0.4 s; hours near
    --max-bytes). The law as the regexes' (test_describe.assert_linear): 4n tools cost
    less than 8x n (linear: 4x; quadratic: 16x), CPU time, measured again up to 3 times."""
    from caveman_batch.single import lint

    small, large = _many_tools(1_000), _many_tools(4_000)
    report = lint(large, "many.json")
    assert [len(tool["changes"]) for tool in report["tools"]] == [3] * 4_000
    assert report["tools"][3_777]["changes"][0]["path"].startswith("/tools/3777/")
    for _attempt in range(3):
        before = time.process_time()
        lint(small, "many.json")
        t_small = time.process_time() - before
        before = time.process_time()
        lint(large, "many.json")
        t_large = time.process_time() - before
        if t_large < 8 * t_small + 0.02:
            break
    assert t_large < 8 * t_small + 0.02, f"{t_small:.3f}s at 1,000 tools, {t_large:.3f}s at 4,000"


def test_lint_json_commits_nothing(catalog: Path, capfdbinary: pytest.CaptureFixture[bytes]) -> None:
    assert run_in_process(["lint", str(catalog), "--json"]) == 0
    report = json.loads(capfdbinary.readouterr().out)
    expected, result = compress(CATALOG)
    assert (report["status"], report["shape"], report["encoding"], report["basis"]) == (
        "ok", "mcp-tools", "o200k_base", "inferred")
    assert (report["tokens_before"], report["tokens_after"]) == (result.tokens_before, result.tokens_after)
    tools = report["tools"]
    assert [t["name"] for t in tools] == ["search_issues", "weather", "ping"]
    for entry, old, new in zip(tools, json.loads(CATALOG)["tools"], json.loads(expected)["tools"]):
        assert (entry["tokens_before"], entry["tokens_after"]) == (compact_tokens(old), compact_tokens(new))
    first = tools[0]["changes"][0]
    assert first["path"] == "/tools/0/description" and first["kind"] == "description"
    assert (first["before"], first["dropped"], first["lead_cut"]) == (SEARCH, [F1, F2], False)
    assert first["after"] == json.loads(expected)["tools"][0]["description"]
    cut = tools[1]["changes"][0]
    assert cut["lead_cut"] is True and cut["after"].endswith("The city must be named in full.")
    assert tools[2]["changes"] == []
    assert not (Path(os.environ["CAVEMAN_HOME"]) / "ccr.lmdb").exists()


def test_lint_of_what_passes_through(tmp_path: Path, capfdbinary: pytest.CaptureFixture[bytes]) -> None:
    path = tmp_path / "not-a-catalog.json"
    path.write_bytes(b'{"foo": 1}')
    assert run_in_process(["lint", str(path)]) == 0
    assert capfdbinary.readouterr().out.decode() == (
        f"{path}: passes through unchanged: unknown shape: not an MCP, JSON-RPC, OpenAI or Anthropic "
        "tool catalog\n")
    assert run_in_process(["lint", str(path), "--json"]) == 0
    report = json.loads(capfdbinary.readouterr().out)
    assert (report["status"], report["tools"]) == ("passthrough", [])


# -- profile ---------------------------------------------------------------------------


@pytest.mark.parametrize("raw", [CATALOG, b'{"foo": 1}', b"[", compress(CATALOG)[0]],
                         ids=["catalog", "unknown", "malformed", "compressed"])
def test_profile_prints_the_selection_profile(raw: bytes, tmp_path: Path,
                                              capfdbinary: pytest.CaptureFixture[bytes]) -> None:
    path = tmp_path / "c.json"
    path.write_bytes(raw)
    assert run_in_process(["profile", str(path)]) == 0
    assert json.loads(capfdbinary.readouterr().out) == json.loads(json.dumps(profile(raw)))


def test_profile_of_input_and_output_agree(catalog: Path, tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch,
                                           capfdbinary: pytest.CaptureFixture[bytes]) -> None:
    assert run_in_process(["profile", str(catalog)]) == 0
    from_file = capfdbinary.readouterr().out
    feed_stdin(monkeypatch, compress(CATALOG)[0])
    assert run_in_process(["profile", "-"]) == 0
    assert capfdbinary.readouterr().out == from_file
    data = json.loads(from_file)
    params = data["tools"][0]["inputSchema"]["parameters"]
    assert params == [{"path": "q", "required": True, "type": "string"},
                      {"path": "state", "required": False, "type": "string", "enum": ["open", "closed"],
                       "default": "open"}]


# -- lone surrogates: not valid Unicode, passed through elsewhere -------------------------

SURROGATE_DESCRIPTION = ('{"tools": [{"name": "t", "description": "%s \\ud800"}]}' % SEARCH).encode()
SURROGATE_NAME = b'{"tools": [{"name": "\\ud800", "description": "d"}]}'


@pytest.mark.parametrize("raw", [SURROGATE_DESCRIPTION, SURROGATE_NAME], ids=["description", "name"])
def test_shrink_passes_lone_surrogates_through(raw: bytes, tmp_path: Path, store_url: str,
                                               capfdbinary: pytest.CaptureFixture[bytes]) -> None:
    path = tmp_path / "s.json"
    path.write_bytes(raw)
    assert run_in_process(["shrink", str(path), "--store", store_url]) == 0
    captured = capfdbinary.readouterr()
    assert captured.out == raw and one_report(captured.err)["status"] == "passthrough"


@pytest.mark.parametrize("raw", [SURROGATE_DESCRIPTION, SURROGATE_NAME], ids=["description", "name"])
def test_lint_passes_lone_surrogates_through(raw: bytes, tmp_path: Path,
                                             capfdbinary: pytest.CaptureFixture[bytes]) -> None:
    path = tmp_path / "s.json"
    path.write_bytes(raw)
    assert run_in_process(["lint", str(path), "--json"]) == 0
    assert json.loads(capfdbinary.readouterr().out)["status"] == "passthrough"


def test_profile_prints_lone_surrogates(tmp_path: Path, capfdbinary: pytest.CaptureFixture[bytes]) -> None:
    path = tmp_path / "s.json"
    path.write_bytes(SURROGATE_NAME)
    assert run_in_process(["profile", str(path)]) == 0
    assert json.loads(capfdbinary.readouterr().out)["tools"][0]["name"] == "\ud800"


def test_default_workers_leave_the_index_writer_a_core(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """Without --workers: the cores this process may run on, one fewer with --index (its
    writer is a process that keeps a core busy), never fewer than 1."""
    from caveman_batch import pipeline

    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3}, raising=False)
    assert (cli.default_workers(False), cli.default_workers(True)) == (4, 3)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0}, raising=False)
    assert (cli.default_workers(False), cli.default_workers(True)) == (1, 1)
    # what `compress` hands the run, with and without --index, and with --workers
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2}, raising=False)
    seen: list[int] = []

    def run(config: pipeline.Config, progress: object = None) -> pipeline.Summary:
        seen.append(config.workers)
        return pipeline.Summary()

    monkeypatch.setattr(pipeline, "run", run)
    (tmp_path / "c.json").write_text('{"tools": []}')
    base = ["compress", str(tmp_path / "c.json"), "-o", str(tmp_path / "out"), "-q"]
    for extra in ([], ["--index", str(tmp_path / "i.db")], ["--index", str(tmp_path / "i.db"),
                                                             "--workers", "3"]):
        assert cli.main([*base, *extra]) == 0
    capsys.readouterr()
    assert seen == [3, 2, 3]
