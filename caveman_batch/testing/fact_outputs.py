"""Real tool outputs that hold facts a view used to lose with room to spare (issue 17).

Each generator runs a real tool (gcc, cargo offline, node, pip --no-index, pytest, ruff,
python's logging) in a directory it is given, or writes an output in a tool's documented
format where the machine lacks the tool (esbuild), and returns it with the facts a view
at 2,000 chars must show. `Output.path` is the file a read came from, for the code cut.
"""

from __future__ import annotations

import csv
import gzip
import io
import json
import os
import subprocess
import sys
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path

from .payload_outputs import Output as _Output
from .payload_outputs import unusable


@dataclass(frozen=True)
class Output(_Output):
    path: str | None = None


class ToolMissing(RuntimeError):
    """The tool a generator runs is not on this machine, or cannot run on it (a test then
    skips, or fails in CI)."""


def _run(args: list[str], cwd: Path, env: dict[str, str] | None = None, timeout: int = 300) -> bytes:
    if Path(args[0]).is_absolute():  # this Python, or a program a generator built
        why = None if Path(args[0]).exists() else f"{args[0]} does not exist"
    else:  # a tool on PATH: probed in the environment it runs in
        why = unusable(args[0], cwd, os.environ if env is None else env)
    if why is not None:
        raise ToolMissing(why)
    done = subprocess.run(args, cwd=cwd, capture_output=True, env=env, timeout=timeout, check=False)
    return done.stdout + done.stderr


def _fresh(tmp: Path) -> Path:
    tmp.mkdir(parents=True, exist_ok=True)
    return tmp


def minified_bundle(tmp: Path) -> Output:
    """A one-line bundle node writes (40 KB of code on one line, a licence line first)."""
    script = ("const parts=[];for(let i=0;i<900;i++)parts.push(`function f${i}(a){return a*${i}+1}`);"
              "process.stdout.write('/*! demo v1.0.0 | MIT */\\n'+parts.join(';')+';\\n');")
    out = _run(["node", "-e", script], _fresh(tmp))
    return Output("minified-bundle", out, "size-both", ("/*! demo v1.0.0 | MIT */", "function f0(a){return a*0+1}",
                                                         "function f40(a){return a*40+1}"))


def pip_no_match(tmp: Path) -> Output:
    """pip --no-index against a folder of 400 releases, none of them the one asked for: the
    "Could not find a version" line lists every version (one line of ~3 KB)."""
    links = _fresh(tmp) / "links"
    links.mkdir(exist_ok=True)
    for i in range(400):
        (links / f"demo_pkg-0.{i // 20}.{i % 20}.tar.gz").write_bytes(b"")
    env = {**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_NO_INPUT": "1"}
    out = _run([sys.executable, "-m", "pip", "install", "--no-index", "--find-links", str(links),
                "demo-pkg==9.9"], tmp, env)
    return Output("pip-no-match", out, "install",
                  ("Could not find a version that satisfies the requirement demo-pkg==9.9",
                   "No matching distribution found for demo-pkg==9.9"), "bash")


def ci_json() -> Output:
    """A CI API answer: 40 jobs of 14 keys each, one job failing in its steps[].error."""
    jobs = []
    for j in range(40):
        steps: list[dict[str, object]] = [{"name": f"step-{s}", "status": "ok", "seconds": s + j} for s in range(6)]
        if j == 27:
            steps[4] = {"name": "step-4", "status": "ok",
                        "error": {"code": "E_DISK_FULL", "message": "no space left on /var/cache"}}
        job: dict[str, object] = {f"field_{k}": f"value {k} of job {j}" for k in range(12)}
        job["steps"] = steps
        job["id"] = j
        jobs.append(job)
    text = json.dumps({"pipeline": 812, "jobs": jobs}, indent=2)
    return Output("ci-json", text.encode(), "json", ("E_DISK_FULL", "no space left on /var/cache", '"steps"'))


ESBUILD = """\
✘ [ERROR] Could not resolve "./widgets/w{n}"

    src/pages/page{n}.tsx:{l}:22:
      {l} │ import {{ W{n} }} from "./widgets/w{n}";
        ╵                       ~~~~~~~~~~~~~~~~

"""


def esbuild_output(n: int = 40) -> Output:
    """esbuild's documented diagnostic format (no esbuild here): each error's location and
    code frame come after a blank line."""
    text = "".join(ESBUILD.format(n=i, l=i % 9 + 1) for i in range(n)) + f"{n} errors\n"
    return Output("esbuild", text.encode(), "build",
                  ('✘ [ERROR] Could not resolve "./widgets/w0"', "src/pages/page0.tsx:1:22:",
                   'import { W0 } from "./widgets/w0";', f"{n} errors"))


CARGO_LIB = "pub fn f{n}() -> u32 {{\n    let x: u32 = \"text\";\n    x\n}}\n\n"


def cargo_mismatched(tmp: Path) -> Output:
    """`cargo build --offline` of a crate with 30 identical mismatched-type errors, then one
    distinct error (an unknown name) the view must still show."""
    crate = _fresh(tmp) / "demo"
    (crate / "src").mkdir(parents=True, exist_ok=True)
    (crate / "Cargo.toml").write_text('[package]\nname = "demo"\nversion = "0.1.0"\nedition = "2021"\n')
    body = "".join(CARGO_LIB.format(n=i) for i in range(30))
    body += "pub fn last() -> u32 {\n    undefined_total + 1\n}\n"
    (crate / "src" / "lib.rs").write_text(body)
    env = {**os.environ, "CARGO_TARGET_DIR": str(tmp / "target"), "CARGO_TERM_COLOR": "never"}
    out = _run(["cargo", "build", "--offline", "--quiet"], crate, env)
    return Output("cargo-mismatched", out, "build",
                  ("error[E0308]: mismatched types", "×30", "src/lib.rs:2:18", "error[E0425]",
                   "undefined_total", "could not compile `demo`"), "bash")


GCC_SRC = """\
#include <stdio.h>

int helper_{n}(int v) {{
    return v + missing_{n};
}}
"""


def gcc_build(tmp: Path) -> Output:
    """gcc on 12 files, each with one error of its own and six times one warning: the errors
    shown with their frames, the 72 warnings one line with their count and first places."""
    src = _fresh(tmp) / "src"
    src.mkdir(exist_ok=True)
    names = []
    for i in range(12):
        (src / f"m{i}.c").write_text(GCC_SRC.format(n=i) + "".join(
            f"int pad_{i}_{k}(int a) {{ int unused; return a; }}\n" for k in range(6)))
        names.append(f"src/m{i}.c")
    env = {**os.environ, "LC_ALL": "C"}  # ASCII quotes in the messages, whatever the locale
    out = _run(["gcc", "-c", "-Wall", "-fdiagnostics-color=never", *names], tmp, env)
    group = ("[×72 warning: unused variable 'unused' [-Wunused-variable]; at src/m0.c:6:26, src/m0.c:7:26, "
             "src/m0.c:8:26, src/m0.c:9:26 and 68 more]")
    return Output("gcc-build", out, "build", ("src/m0.c:4:16: error: 'missing_0' undeclared",
                                              "src/m11.c:4:16", "return v + missing_0;", group), "make")


def ruff_syntax(tmp: Path) -> Output:
    """`ruff check --output-format concise` over 30 files with unused imports and 6 that do not parse."""
    root = _fresh(tmp) / "pkg"
    root.mkdir(exist_ok=True)
    for i in range(30):
        (root / f"m{i:02d}.py").write_text("import os\nimport sys\nimport json\n")
    for i in range(6):
        (root / f"broken{i}.py").write_text(f"def f{i}(:\n    pass\n")
    out = _run(["ruff", "check", "--no-cache", "--isolated", "--output-format", "concise", "pkg"], tmp)
    text = out.decode()
    found = next(line for line in text.split("\n") if line.startswith("Found "))
    return Output("ruff-syntax", out, "lint", (f"invalid-syntax ×{text.count(': invalid-syntax: ')}", "F401 ×90",
                                               found, "pkg/broken0.py:1:8: invalid-syntax"), "bash")


PYTEST_BODY = """\

def test_pass_{i}():
    print("ok ok ok ok ok ok ok ok ok ok ok ok ok ok ok ok ok ok ok ok ok ok ok ok ok ok ok ok")
    assert STATUS == "ok "
"""
PYTEST_FAIL = """\

def test_fail_{i}():
    print("ok " * 30)
    assert {i} * 2 == {i} + 100, "fail number {i}"
"""


def pytest_many_failures(tmp: Path) -> Output:
    """A real pytest run (not -v) of 60 passing and 21 failing tests whose output is full of "ok "."""
    suite = _fresh(tmp) / "suite"
    suite.mkdir(exist_ok=True)
    (suite / "pytest.ini").write_text("[pytest]\naddopts =\n")
    (suite / "test_many.py").write_text('STATUS = "ok "\n\n' + "".join(PYTEST_BODY.format(i=i) for i in range(60))
                                        + "".join(PYTEST_FAIL.format(i=i) for i in range(21)))
    # no PYTEST* variable, and none of CI's: under CI pytest writes each failure's whole
    # message into its short summary, and the output would depend on where tests run
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("PYTEST") and k not in ("CI", "BUILD_NUMBER")}
    out = _run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:randomly", "-rfE",
                "test_many.py"], suite, env)
    facts = tuple(f"test_many.py::test_fail_{i} - AssertionError: fail number {i}" for i in range(21))
    return Output("pytest-many", out, "tests", (*facts, "21 failed, 60 passed"), "bash")


UNITTEST_BODY = """\
import unittest


class Checks(unittest.TestCase):
{tests}

if __name__ == "__main__":
    unittest.main(verbosity=2)
"""


def unittest_run(tmp: Path) -> Output:
    """A real `unittest -v` run: 300 passing tests and 3 failing, the failures after a wall of
    "... ok" lines."""
    tests = "".join(f"    def test_ok_{i}(self):\n        self.assertEqual({i} + 1, {i + 1})\n\n" for i in range(300))
    tests += "".join(f"    def test_fail_{i}(self):\n        self.assertEqual({i}, {i + 7}, 'drift {i}')\n\n"
                     for i in range(3))
    (_fresh(tmp) / "test_checks.py").write_text(UNITTEST_BODY.format(tests=tests))
    out = _run([sys.executable, "test_checks.py"], tmp)
    return Output("unittest", out, "tests", ("[tests cut: 300 passing tests omitted;", "FAIL: test_fail_0",
                                             "AssertionError: 0 != 7 : drift 0", "FAILED (failures=3)",
                                             "Ran 303 tests"), "bash")


LOGGING_APP = """\
import logging

logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", datefmt="%Y-%m-%dT%H:%M:%S",
                    level=logging.INFO)
log = logging.getLogger("billing")
for i in range(400):
    log.info("processed invoice %d", i)
    if i == 250:
        try:
            {{}}["customer_id"]
        except KeyError:
            log.exception("invoice %d could not be billed", i)
"""


def logging_traceback(tmp: Path) -> Output:
    """Python logging output with one `log.exception`: its exception line is the fact."""
    (_fresh(tmp) / "app.py").write_text(LOGGING_APP.replace("{{}}", "{}"))
    out = _run([sys.executable, "app.py"], tmp)
    return Output("logging-traceback", out, "log", ("ERROR billing: invoice 250 could not be billed",
                                                    "KeyError: 'customer_id'"), "bash")


RETRY_APP = """\
import logging

logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", datefmt="%Y-%m-%dT%H:%M:%S",
                    level=logging.INFO)
log = logging.getLogger("sync")
for i in range(600):
    log.info("synced batch %d", i)
    if i % 10 == 3:
        log.error("batch %d: upstream 10.0.%d.7 timed out after %d ms", i, i % 4, 3000 + i)
    if i == 512:
        log.error("batch %d: checksum mismatch in ledger.db, sync stopped for this shard", i)
"""


def logging_repeats(tmp: Path) -> Output:
    """Python logging with 60 errors of one message (numbers varying) and one distinct error
    late in the run: the distinct one shows, the 60 are one line with their count and lines."""
    (_fresh(tmp) / "app.py").write_text(RETRY_APP)
    out = _run([sys.executable, "app.py"], tmp)
    group = "[×60 ERROR sync: batch #: upstream #.#.#.# timed out after # ms; at lines 5, 16, 27, 38 and 56 more]"
    return Output("logging-repeats", out, "log", ("checksum mismatch in ledger.db", group), "bash")


C_FUNC = """\
static int parse_field_{n}(const char *src, size_t len)
{{
    int total = 0;
    for (size_t i = 0; i < len; i++) {{
        total += src[i] * {n};
    }}
    return total;
}}

"""


def c_source() -> Output:
    """A C file read whole: 6 includes and 18 functions, the functions being the outline."""
    text = "".join(f"#include <{h}.h>\n" for h in ("stdio", "stdlib", "string", "stdint", "errno", "stddef"))
    text += "\n" + "".join(C_FUNC.format(n=i) for i in range(18))
    text += "int\nmain(int argc, char **argv)\n{\n    return parse_field_0(argv[0], 1);\n}\n"
    return Output("c-source", text.encode(), "code",
                  ("static int parse_field_0(const char *src, size_t len)",
                   "static int parse_field_17(const char *src, size_t len)", "main(int argc, char **argv)"),
                  "read", "src/fields.c")


def python_source() -> Output:
    """A Python module of 4 classes with 25 methods each, then 10 top-level functions."""
    parts = ["import os\nimport sys\n\n"]
    for c in range(4):
        parts.append(f"class Handler{c}:\n    \"\"\"Handles kind {c}.\"\"\"\n\n")
        parts += [f"    def method_{m}(self, value):\n        return value + {m}\n\n" for m in range(25)]
        parts.append("\n")
    parts += [f"def entry_point_{f}(argv):\n    return Handler0().method_0(len(argv)) + {f}\n\n\n" for f in range(10)]
    return Output("python-source", "".join(parts).encode(), "code",
                  (*(f"class Handler{c}:" for c in range(4)), *(f"def entry_point_{f}(argv):" for f in range(10))),
                  "read", "app/handlers.py")


def malformed_csv() -> Output:
    """3,000 rows by Python's csv writer (some with a quoted comma) and two hand-broken rows mid-table."""
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(["id", "name", "city", "amount"])
    for i in range(3000):
        writer.writerow([i, f"customer {i}", "Lyon, FR" if i % 7 == 0 and i > 100 else "Oslo", i * 3])
    rows = buf.getvalue().split("\n")
    rows[1201] = "1200,customer 1200,Oslo"  # a field short
    rows[2402] = "2401,customer 2401,Oslo,7203,extra"  # a field too many
    return Output("malformed-csv", "\n".join(rows).encode(), "csv",
                  ("id,name,city,amount", "1200,customer 1200,Oslo", "2401,customer 2401,Oslo,7203,extra"))


def pip_list_table(tmp: Path) -> Output:
    """`pip list` (a table under a header) read from a shell, so the size fallback keeps its tail."""
    env = {**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    out = _run([sys.executable, "-m", "pip", "list", "--no-index"], _fresh(tmp), env)
    head = out.decode().split("\n", 1)[0]
    last = out.decode().rstrip("\n").rsplit("\n", 1)[-1]
    return Output("pip-list", out, "size-tail", (head, last), "bash")


def _png() -> bytes:
    def chunk(kind: bytes, data: bytes) -> bytes:
        return len(data).to_bytes(4, "big") + kind + data + zlib.crc32(kind + data).to_bytes(4, "big")

    rows = b"".join(b"\x00" + bytes((x * 7 + y) % 256 for x in range(3 * 200)) for y in range(200))
    ihdr = (200).to_bytes(4, "big") * 2 + b"\x08\x02\x00\x00\x00"
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(rows, 0)) + chunk(b"IEND", b"")


def binaries(tmp: Path) -> list[Output]:
    """An ELF gcc links, a PNG, a gzip and a zip file: each gets its size and type as its view."""
    made = _fresh(tmp)
    (made / "hello.c").write_text("#include <stdio.h>\nint main(void) { puts(\"hi\"); return 0; }\n")
    _run(["gcc", "-O0", "-o", "hello", "hello.c"], made)
    elf = (made / "hello").read_bytes()
    payload = "".join(f"line {i} of a log\n" for i in range(5000)).encode()
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("data.txt", payload)
    return [Output(f"binary-{kind}", data, "binary", (f"bytes, {kind}]", "ccr_"))
            for kind, data in (("ELF", elf), ("PNG", _png()), ("gzip", gzip.compress(payload, mtime=0)),
                               ("zip", buf.getvalue()))]


def fixtures(tmp: Path, skipped: dict[str, str] | None = None) -> list[Output]:
    """Every output above whose tool can run on this machine; `skipped`, when given, gets
    {generator: why} for the others."""
    skipped = {} if skipped is None else skipped
    made: list[Output] = [ci_json(), esbuild_output(), c_source(), python_source(), malformed_csv()]
    for make in (minified_bundle, pip_no_match, cargo_mismatched, gcc_build, ruff_syntax,
                 pytest_many_failures, unittest_run, logging_traceback, logging_repeats, pip_list_table):
        try:
            made.append(make(tmp / make.__name__))
        except ToolMissing as exc:
            skipped[make.__name__] = str(exc)
    try:
        made += binaries(tmp / "binaries")
    except ToolMissing as exc:
        skipped["binaries"] = str(exc)
    return made
