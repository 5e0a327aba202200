"""Real tool outputs for the payload tests and benchmarks, produced on the spot.

Each generator runs a real tool (pytest, python, git, find) in a directory it is
given, or writes an output in a tool's documented format, and returns the bytes
with the facts a view must keep. Nothing here is a captured file with one machine's
paths in it.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Output:
    name: str
    data: bytes
    strategy: str  # the cut that should take it
    facts: tuple[str, ...]  # strings that must survive in the view
    tool: str | None = None


def _run(args: list[str], cwd: Path, env: dict[str, str] | None = None) -> bytes:
    done = subprocess.run(args, cwd=cwd, capture_output=True, env=env, timeout=120, check=False)
    return done.stdout + done.stderr


FAILING = ("test_checkout_total", "test_parse_header", "test_refund_rounding")


def pytest_run(tmp: Path) -> Output:
    """A real pytest run of a generated suite: 600 passing tests and 3 failing."""
    suite = tmp / "suite"
    suite.mkdir(parents=True)
    (suite / "pytest.ini").write_text("[pytest]\naddopts =\n")
    body = "\n".join(f"def test_ok_{i}():\n    assert {i} + 1 == {i + 1}\n" for i in range(600))
    body += "\n\ndef test_checkout_total():\n    total = sum([1, 2, 3])\n    assert total == 7, 'cart total'\n"
    body += "\n\ndef test_parse_header():\n    raise ValueError('bad header: X-Id')\n"
    body += "\n\ndef test_refund_rounding():\n    assert round(2.675, 2) == 2.68\n"
    (suite / "test_shop.py").write_text(body)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST")}
    out = _run([sys.executable, "-m", "pytest", "-v", "-p", "no:cacheprovider", "-p", "no:randomly",
                "test_shop.py"], suite, env)
    return Output("pytest", out, "tests", (*FAILING, "3 failed, 600 passed"), "bash")


def traceback_run(tmp: Path) -> Output:
    """A Python traceback through own frames, a fake site-packages library and json."""
    site = tmp / "venv" / "lib" / "site-packages" / "fakelib"
    site.mkdir(parents=True)
    (site / "__init__.py").write_text("")
    lib = "import json\n\n" + "".join(
        f"def layer_{i}(raw):\n    return layer_{i + 1}(raw)\n\n" for i in range(8))
    lib += "def layer_8(raw):\n    return json.loads(raw)\n"
    (site / "core.py").write_text(lib)
    app = "from fakelib import core\n\n" + "".join(
        f"def step_{i}(raw):\n    return step_{i + 1}(raw)\n\n" for i in range(25))
    app += "def step_25(raw):\n    return core.layer_0(raw)\n\nstep_0('{not json')\n"
    (tmp / "app.py").write_text(app)  # tmp exists: site was made under it
    env = {**os.environ, "PYTHONPATH": str(site.parent)}
    out = _run([sys.executable, "app.py"], tmp, env)
    return Output("traceback", out, "stacktrace",
                  ("json.decoder.JSONDecodeError: Expecting property name", "step_25", "Traceback"))


DEEP_APP = """\
def handler(request):
    return dispatch(request["path"], request["depth"])


def dispatch(path, depth):
    return walk(path.split("/"), depth)


def walk(parts, depth):
    if depth == 0:
        return parse_leaf(parts[-1])
    return visit(parts, depth - 1)


def visit(parts, depth):
    return walk(parts, depth)


def parse_leaf(token):
    return check(token)


def check(token):
    return int(token)


handler({"path": "api/v1/items/x12", "depth": 57})
"""
DEEP_ERROR = "ValueError: invalid literal for int() with base 10: 'x12'"


def deep_traceback_run(tmp: Path) -> Output:
    """A real 120-frame Python traceback, every frame the program's own (handler -> dispatch ->
    walk/visit x 115 -> parse_leaf -> check): both ends of it must survive."""
    tmp.mkdir(parents=True)
    (tmp / "deep.py").write_text(DEEP_APP)
    out = _run([sys.executable, "deep.py"], tmp)
    return Output("deep-traceback", out, "stacktrace",
                  (DEEP_ERROR, "in <module>", "in handler", "in dispatch", "in parse_leaf", "in check",
                   "return int(token)"))


AUTHORS = ("Ada Lovelace", "Grace Hopper", "Alan Turing", "Edsger Dijkstra", "Barbara Liskov",
           "Donald Knuth", "Frances Allen")
_EPOCH = 1_767_254_400  # 2026-01-01T08:00:00Z


def _module(values: list[int]) -> str:
    """A Python module of small functions, so git names each hunk's function."""
    return "".join(f"def value_{k}(x):\n    return x + {v}\n\n\n" for k, v in enumerate(values))


def _data(text: str) -> bytes:
    raw = text.encode()
    return b"data %d\n%s\n" % (len(raw), raw)


def _commit(c: int, message: str, files: dict[str, str]) -> bytes:
    """Commit `c` as `git fast-import` reads it: its author (one of seven, in turn), its date
    (a day and a minute after the one before), its message and its files' new contents."""
    name = AUTHORS[c % len(AUTHORS)]
    who = f"{name} <{name.split()[0].lower()}@example.com> {_EPOCH + c * 86_460} +0000"
    parts = [f"commit refs/heads/main\nmark :{c + 1}\nauthor {who}\ncommitter {who}\n".encode(),
             _data(message), f"from :{c}\n".encode() if c else b""]
    for path, text in files.items():
        parts += [f"M 100644 inline {path}\n".encode(), _data(text)]
    return b"".join(parts) + b"\n"


def git_repo(tmp: Path, commits: int = 61, files: int = 30) -> Path:
    """A repo of `commits` commits by distinct authors on distinct dates, one in three with a
    body, written by `git fast-import` (one process, not three per commit): each of the first
    ones rewrites four modules whole; the last edits one or two functions in every module."""
    repo = tmp / "repo"
    repo.mkdir(parents=True)
    env = {**os.environ, "GIT_CONFIG_NOSYSTEM": "1", "HOME": str(tmp)}
    _run(["git", "init", "-q", "-b", "main"], repo, env)
    rng = random.Random(7)
    modules = {f: [rng.randint(0, 999) for _ in range(12)] for f in range(files)}
    stream = []
    for c in range(commits - 1):
        changed = {}
        for f in (range(files) if c == 0 else rng.sample(range(files), 4)):
            modules[f] = [rng.randint(0, 999) for _ in range(12)]
            changed[f"src/mod_{f:02d}.py"] = _module(modules[f])
        body = f"\n\nWhy: longer body {c}." if c % 3 == 0 else ""  # many commits have no body
        stream.append(_commit(c, f"Change {c}: tune values{body}", changed))
    for f in range(files):  # the last commit: a small edit in every module
        for k in (2, 9)[:1 + f % 3 // 2]:
            modules[f][k] += 1
    stream.append(_commit(commits - 1, f"Change {commits - 1}: bump every module\n\nOne edit each.",
                          {f"src/mod_{f:02d}.py": _module(modules[f]) for f in range(files)}))
    done = subprocess.run(["git", "fast-import", "--quiet"], cwd=repo, input=b"".join(stream), env=env,
                          capture_output=True, timeout=120, check=False)
    if done.returncode:
        raise RuntimeError(f"git fast-import failed: {done.stderr.decode(errors='replace')}")
    return repo


def _diff_facts(diff: str) -> tuple[str, ...]:
    """Every file name, and the first file's hunk headers and changed lines."""
    names = sorted({line.split(" b/")[-1] for line in diff.splitlines() if line.startswith("diff --git ")})
    first = diff.split("\ndiff --git ", 1)[0].splitlines()
    hunks = [line for line in first if line.startswith(("@@", "+", "-")) and not line.startswith(("+++", "---"))]
    return (*names, *hunks)


def git_outputs(tmp: Path) -> tuple[Output, Output, Output]:
    """`git log` of 61 commits; `git diff` of the last commit (30 files, small hunks) and of the
    last 20 (30 files rewritten)."""
    repo = git_repo(tmp)
    env = {**os.environ, "GIT_CONFIG_NOSYSTEM": "1", "HOME": str(tmp)}
    log = _run(["git", "log"], repo, env)
    newest = log.decode().split("\n\n", 1)[0].split("\n")  # commit, Author, Date
    edit = _run(["git", "diff", "HEAD~1", "HEAD"], repo, env)
    rewrite = _run(["git", "diff", "HEAD~20", "HEAD"], repo, env)
    rewrite_names = _diff_facts(rewrite.decode())[:30]
    return (Output("git-log", log, "gitlog", (*newest, "Change 60: bump every module",
                                                   "Change 47: tune values")),
            Output("git-diff", edit, "diff", _diff_facts(edit.decode())),
            Output("git-diff-rewrite", rewrite, "diff", rewrite_names))


def find_tree(tmp: Path) -> Output:
    root = tmp / "tree"
    for d in range(24):
        sub = root / f"pkg_{d:02d}" / "data"
        sub.mkdir(parents=True)
        for f in range(40):
            (sub / f"item_{f:03d}.txt").write_text("")
    out = _run(["find", "."], root)
    return Output("find", out, "tree", tuple(f"./pkg_{d:02d}/data" for d in range(24)), "find")


def api_json(items: int = 5000) -> Output:
    rng = random.Random(3)
    rows: list[dict[str, object]] = [
        {"id": i, "name": f"order-{i}", "status": "ok", "amount": rng.randint(1, 999)}
        for i in range(items)]
    rows[items * 3 // 4] = {"id": items * 3 // 4, "status": "error",
                            "error": {"code": "E_UPSTREAM_TIMEOUT", "message": "payment gateway timed out"}}
    doc = {"data": {"orders": rows, "page": 1}, "meta": {"count": items, "next": None}}
    return Output("api-json", json.dumps(doc, indent=2).encode(), "json",
                  ("E_UPSTREAM_TIMEOUT", "payment gateway timed out"))


def service_log(lines: int = 6000) -> Output:
    rng = random.Random(5)
    out: list[str] = []
    errors: list[str] = []
    for i in range(lines):
        stamp = f"2026-01-02T03:{i // 600 % 60:02d}:{i % 60:02d}.{i % 1000:03d}Z"
        roll = rng.random()
        if roll < 0.004:
            line = f"{stamp} ERROR worker-{i % 7} job {i} failed: connection reset by peer"
            errors.append(line)
        elif roll < 0.02:
            line = f"{stamp} WARN worker-{i % 7} retrying job {i} (attempt 2)"
        else:
            line = f"{stamp} INFO worker-{i % 7} processed job {i} in {rng.randint(1, 90)}ms"
        out.append(line)
    return Output("log", ("\n".join(out) + "\n").encode(), "log", tuple(errors))


TSC = "src/app/{n}.ts({l},{c}): error TS2322: Type 'string' is not assignable to type 'number'.\n"
GCC = ("src/mod{n}.c:{l}:{c}: error: 'count' undeclared (first use in this function)\n"
       "   {l} |     count += 1;\n      |     ^~~~~\n"
       "src/mod{n}.c:{l}:{c}: warning: unused variable 'tmp' [-Wunused-variable]\n"
       "   {l} |     int tmp;\n      |         ^~~\n")
ESLINT_FILE = "/home/dev/web/src/components/Widget{n}.jsx\n"
ESLINT = "  {l}:{c}  {sev}  '{v}' is defined but never used  no-unused-vars\n"
RUFF = "src/pkg/mod_{n}.py:{l}:{c}: F401 [*] `os` imported but unused\n"
CARGO = ("error[E0308]: mismatched types\n --> src/lib{n}.rs:{l}:{c}\n  |\n{l} |     let x: u32 = \"a\";\n"
         "  |            ---   ^^^ expected `u32`, found `&str`\n\n")


def tsc_output(n: int = 300) -> Output:
    text = "".join(TSC.format(n=i, l=i % 90 + 1, c=i % 9 + 1) for i in range(n))
    text += f"\nFound {n} errors in {n} files.\n"
    return Output("tsc", text.encode(), "build", (f"Found {n} errors", "src/app/0.ts(1,1): error TS2322"))


def gcc_output(n: int = 120) -> Output:
    text = "".join(GCC.format(n=i, l=i + 10, c=5) for i in range(n))
    text += f"{n} warnings and {n} errors generated.\nmake: *** [Makefile:12: all] Error 1\n"
    return Output("gcc", text.encode(), "build", ("src/mod0.c:10:5: error: 'count' undeclared",
                                                 "make: *** [Makefile:12: all] Error 1"), "make")


def eslint_output(files: int = 80) -> Output:
    parts = []
    for f in range(files):
        parts.append(ESLINT_FILE.format(n=f))
        parts += [ESLINT.format(l=k + 1, c=7, sev="error" if k % 3 == 0 else "warning", v=f"x{k}")
                  for k in range(6)]
        parts.append("\n")
    parts.append(f"✖ {files * 6} problems ({files * 2} errors, {files * 4} warnings)\n")
    return Output("eslint", "".join(parts).encode(), "lint", (f"✖ {files * 6} problems", "no-unused-vars"))


def ruff_output(n: int = 400) -> Output:
    text = "".join(RUFF.format(n=i, l=1, c=8) for i in range(n)) + f"Found {n} errors.\n"
    return Output("ruff", text.encode(), "lint", (f"Found {n} errors.", "F401"))


def cargo_output(n: int = 60) -> Output:
    text = "".join(CARGO.format(n=i, l=i + 3, c=18) for i in range(n))
    text += f"error: could not compile `demo` (lib) due to {n} previous errors\n"
    return Output("cargo", text.encode(), "build", ("error[E0308]: mismatched types", "could not compile"))


def fixtures(tmp: Path) -> list[Output]:
    """Every output above (the slow ones, pytest and git, run once per call)."""
    made = [pytest_run(tmp / "pytest"), traceback_run(tmp / "tb"), deep_traceback_run(tmp / "deep"),
            *git_outputs(tmp / "git"),
            find_tree(tmp / "find")]
    return made + [api_json(), service_log(), tsc_output(), gcc_output(), eslint_output(),
                   ruff_output(), cargo_output()]
