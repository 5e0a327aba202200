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
import shutil
import subprocess
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Final


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
    # no PYTEST* variable, and none of CI's: under CI pytest writes each failure's whole
    # message into its short summary, and the output would depend on where tests run
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("PYTEST") and k not in ("CI", "BUILD_NUMBER")}
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


# --- The machine's own tools --------------------------------------------------------------
# Each maker below runs a real program in a fresh directory and returns its output with the
# facts a user acts on (the error and where, the summary, the failing package) and the cut it
# must reach. A maker whose program is not installed, or is installed but cannot run here,
# raises Missing; `corpus` collects those with their reasons (the tests skip them, and fail in
# CI, which installs and sets up every one).


class Missing(Exception):
    """A tool a maker needs is not on this machine, or cannot run on it (the message says which)."""


#: how a tool is asked whether it runs, where `--version` is not the way: JDK 8 knows only
#: -version, POSIX find and ls have no version option
_PROBES: Final[dict[str, tuple[str, ...]]] = {
    "javac": ("-version",), "java": ("-version",), "find": (".", "-prune"), "ls": ("-d", "."),
}
PROBE_TIMEOUT: Final = 60  # seconds: a JVM starting on a loaded machine takes a few
#: {executable: why it cannot run, or None}: each is probed once a process
_VERDICTS: dict[str, str | None] = {}


def _first_line(text: bytes) -> str:
    """The first line that is not blank (the error itself; what follows is help or a backtrace)."""
    lines = [line.strip() for line in text.decode("utf-8", "replace").split("\n")]
    return next((line for line in lines if line), "")


def _probe(tool: str, executable: str, cwd: Path, env: Mapping[str, str]) -> str | None:
    """Why `executable` cannot run its probe in `env` (a rustup shim with no toolchain, a
    broken install), or None when the probe exits 0."""
    args = (executable, *_PROBES.get(tool, ("--version",)))
    try:
        done = subprocess.run(args, cwd=cwd, env=env, capture_output=True, timeout=PROBE_TIMEOUT, check=False)
    except subprocess.TimeoutExpired:
        return f"{tool} is installed but cannot run: `{' '.join(args)}` did not end within {PROBE_TIMEOUT} s"
    except OSError as exc:
        return f"{tool} is installed but cannot run: {exc}"
    if done.returncode == 0:
        return None
    said = _first_line(done.stderr) or _first_line(done.stdout) or "(no output)"
    return f"{tool} is installed but cannot run: {said} (`{' '.join(args)}` exits {done.returncode})"


def unusable(tool: str, cwd: Path, env: Mapping[str, str]) -> str | None:
    """Why `tool` cannot be used here: not on the PATH of `env`, or its probe (`--version`, or
    the one in _PROBES) fails when run in `cwd` with `env`, the environment the real call gets;
    None when it can. Each executable is probed once a process: the makers of one tool differ
    only in their own folders (HOME, a target dir), which a probe's verdict does not hang on."""
    executable = shutil.which(tool, path=env.get("PATH"))
    if executable is None:
        return f"{tool} is not installed"
    if executable not in _VERDICTS:
        _VERDICTS[executable] = _probe(tool, executable, cwd, env)
    return _VERDICTS[executable]


def _need(tmp: Path, *tools: str, env: Mapping[str, str] | None = None) -> None:
    """Raise Missing unless every tool can run in `env`, the environment the maker runs them
    with (by default `_env(tmp)`)."""
    env = _env(tmp) if env is None else env
    for tool in tools:
        why = unusable(tool, _fresh(tmp), env)
        if why is not None:
            raise Missing(why)


def _env(tmp: Path, **extra: str) -> dict[str, str]:
    """A child environment with its own HOME (no user config, no caches written elsewhere),
    and none of CI's variables (pytest, npm and others write otherwise under CI: the outputs
    would depend on where the tests run)."""
    keep = {k: v for k, v in os.environ.items()
            if not k.startswith(("PYTEST", "NPM_", "npm_")) and k not in ("CI", "BUILD_NUMBER")}
    return {**keep, "HOME": str(tmp), "GIT_CONFIG_NOSYSTEM": "1", "LC_ALL": "C", **extra}  # C: gcc quotes with ' not ‘ ’


def _fresh(tmp: Path) -> Path:
    tmp.mkdir(parents=True, exist_ok=True)
    return tmp


def _lines_with(out: bytes, *needles: str) -> tuple[str, ...]:
    """The output's lines holding any needle, stripped of trailing blanks, each once."""
    text = out.decode("utf-8", "replace")
    found = [line.rstrip() for line in text.split("\n") if any(n in line for n in needles)]
    return tuple(dict.fromkeys(line for line in found if line))


C_WARNY = """\
#include <stdio.h>
#include <string.h>

static int helper_{n}(int a, int b) {{
    int unused_{n};
    char buf[4];
    strcpy(buf, "overflowing");
    return a + b;
}}
"""


def gcc_mid_errors(tmp: Path) -> Output:
    """gcc -Wall -Wextra on one C file: ~300 warnings, and the 3 errors in the middle (~23 KB
    in, past a 16 KB head and before a 4 KB tail), so only a scan of the whole text sees them."""
    _need(tmp, "gcc")
    tmp = _fresh(tmp)
    parts = [C_WARNY.format(n=i) for i in range(300)]
    parts.insert(150, "int broken_a(void) { return missing_a + 1; }\n"
                     "int broken_b(void) { struct nope *p = 0; return p->field; }\n"
                     "int broken_c(void) { return 1 +; }\n")
    (tmp / "big.c").write_text("".join(parts) + "int main(void) { return helper_0(1, 2); }\n")
    out = _run(["gcc", "-std=c99", "-Wall", "-Wextra", "-c", "big.c", "-o", "big.o"], tmp, _env(tmp))
    return Output("gcc-mid-errors", out, "build",
                  ("'missing_a' undeclared", "invalid use of undefined type 'struct nope'",
                   "error: expected expression before ';' token"), "bash")


def gcc_color(tmp: Path) -> Output:
    """The same kind of run with -fdiagnostics-color=always: every location wrapped in ANSI codes."""
    _need(tmp, "gcc")
    tmp = _fresh(tmp)
    body = "".join(f"int f_{i}(int x) {{ int y_{i}; return x + nope_{i}; }}\n" for i in range(40))
    (tmp / "color.c").write_text(body)
    out = _run(["gcc", "-Wall", "-fdiagnostics-color=always", "-c", "color.c", "-o", "color.o"], tmp, _env(tmp))
    return Output("gcc-color", out, "build", ("color.c:1:38: error: 'nope_0' undeclared", "color.c:2:38: error: 'nope_1' undeclared"),
                  "bash")


def gcc_link(tmp: Path) -> Output:
    """A link that fails: 30 undefined references and collect2's verdict."""
    _need(tmp, "gcc")
    tmp = _fresh(tmp)
    calls = "".join(f"    total += missing_symbol_{i}();\n" for i in range(30))
    decls = "".join(f"int missing_symbol_{i}(void);\n" for i in range(30))
    (tmp / "main.c").write_text(f"{decls}int main(void) {{\n    int total = 0;\n{calls}    return total;\n}}\n")
    out = _run(["gcc", "main.c", "-o", "main"], tmp, _env(tmp))
    return Output("gcc-link", out, "build",
                  ("undefined reference to `missing_symbol_0'", "collect2: error: ld returned 1 exit status"),
                  "bash")


MAKEFILE = """\
CFLAGS = -Wall -Wextra -std=c99
OBJS = {objs}

all: {target}

app: $(OBJS)
\tgcc -o $@ $^

lib.a: $(OBJS)
\tar rcs $@ $^

%.o: %.c
\tgcc $(CFLAGS) -c $< -o $@
"""


def _make_project(tmp: Path, units: int, broken: tuple[int, ...], target: str = "app") -> Path:
    tmp = _fresh(tmp)
    objs = " ".join(f"unit_{i:02d}.o" for i in range(units))
    (tmp / "Makefile").write_text(MAKEFILE.format(objs=objs, target=target))
    if target == "app":
        (tmp / "main.c").write_text("int main(void) { return 0; }\n")
    for i in range(units):
        bad = f"    return {i} + not_declared_{i};\n" if i in broken else f"    return {i};\n"
        (tmp / f"unit_{i:02d}.c").write_text(
            f"int unit_{i:02d}(int a) {{\n    int spare;\n    (void)a;\n{bad}}}\n")
    return tmp


def make_keep_going(tmp: Path) -> Output:
    """`make -k` over 40 units, 3 of them broken (units 11, 23 and 34): every gcc line is there."""
    _need(tmp, "make", "gcc")
    proj = _make_project(tmp, 40, (11, 23, 34))
    out = _run(["make", "-k"], proj, _env(tmp))
    return Output("make-k", out, "build",
                  ("unit_11.c:4:17: error: 'not_declared_11' undeclared",
                   "unit_23.c:4:17: error: 'not_declared_23' undeclared",
                   "unit_34.c:4:17: error: 'not_declared_34' undeclared", "make: Target 'all' not remade"),
                  "bash")


def make_recursive(tmp: Path) -> Output:
    """A top Makefile calling make in 6 sub-folders; one fails (make[1]: *** … Error 1)."""
    _need(tmp, "make", "gcc")
    top = _fresh(tmp)
    subs = [f"lib{k}" for k in range(6)]
    for k, sub in enumerate(subs):
        _make_project(top / sub, 8, (5,) if k == 4 else (), "lib.a")
    rules = "".join(f"\t$(MAKE) -C {sub}\n" for sub in subs)
    (top / "Makefile").write_text(f"all:\n{rules}")
    out = _run(["make"], top, _env(tmp))
    return Output("make-recursive", out, "build",
                  ("unit_05.c:4:16: error: 'not_declared_5' undeclared", "make[1]: *** [Makefile:",
                   "make: *** [Makefile:"), "bash")


def _cargo_project(tmp: Path, name: str, lib: str, main: str | None = None) -> Path:
    tmp = _fresh(tmp)
    (tmp / "Cargo.toml").write_text(f'[package]\nname = "{name}"\nversion = "0.1.0"\nedition = "2021"\n')
    (tmp / "src").mkdir(exist_ok=True)
    (tmp / "src" / ("main.rs" if main is not None else "lib.rs")).write_text(main if main is not None else lib)
    return tmp


def _cargo_env(tmp: Path) -> dict[str, str]:
    """The maker's environment, with the user's cargo and rustup homes: HOME is `tmp` there,
    where a rustup shim would find no toolchain."""
    return _env(tmp, CARGO_TARGET_DIR=str(tmp / "target"), CARGO_TERM_COLOR="never",
                CARGO_HOME=os.environ.get("CARGO_HOME", str(Path.home() / ".cargo")),
                RUSTUP_HOME=os.environ.get("RUSTUP_HOME", str(Path.home() / ".rustup")))


def _cargo(tmp: Path, proj: Path, *args: str) -> bytes:
    return _run(["cargo", *args, "--offline"], proj, _cargo_env(tmp))


def cargo_errors(tmp: Path) -> Output:
    """`cargo build` of a crate with 30 mismatched types and one borrow error."""
    _need(tmp, "cargo", env=_cargo_env(tmp))
    fns = "".join(f'pub fn value_{i}() -> u32 {{\n    let x: u32 = "{i}";\n    x\n}}\n\n' for i in range(30))
    fns += "pub fn moved() -> usize {\n    let v = vec![1];\n    let w = v;\n    v.len() + w.len()\n}\n"
    proj = _cargo_project(tmp, "demo_errors", fns)
    out = _cargo(tmp, proj, "build")
    return Output("cargo-errors", out, "build",
                  ("error[E0308]: mismatched types", "src/lib.rs:2:18", "error[E0382]: borrow of moved value: `v`",
                   "could not compile `demo_errors`"), "bash")


def cargo_warnings(tmp: Path) -> Output:
    """`cargo build` that succeeds with 40 warnings (unused variables)."""
    _need(tmp, "cargo", env=_cargo_env(tmp))
    fns = "".join(f"pub fn value_{i}(input: u32) -> u32 {{\n    let spare_{i} = input;\n    7\n}}\n\n"
                  for i in range(40))
    proj = _cargo_project(tmp, "demo_warnings", fns)
    out = _cargo(tmp, proj, "build")
    return Output("cargo-warnings", out, "build",
                  ("warning: unused variable: `spare_0`", "generated 40 warnings", "Finished"), "bash")


def cargo_test(tmp: Path) -> Output:
    """`cargo test`: 60 passing tests and 3 failing ones."""
    _need(tmp, "cargo", env=_cargo_env(tmp))
    tests = "".join(f"    #[test]\n    fn passes_{i}() {{ assert_eq!({i} + 1, {i + 1}); }}\n" for i in range(60))
    tests += ("    #[test]\n    fn totals_match() { assert_eq!(2 + 2, 5, \"cart total\"); }\n"
              "    #[test]\n    fn parses_header() { let v: Vec<u8> = vec![]; let _ = v[3]; }\n"
              "    #[test]\n    fn rounds_refund() { assert!(1.0_f64 > 2.0, \"refund rounding\"); }\n")
    proj = _cargo_project(tmp, "demo_tests", f"#[cfg(test)]\nmod tests {{\n{tests}}}\n")
    out = _cargo(tmp, proj, "test")
    return Output("cargo-test", out, "tests",
                  ("tests::totals_match", "tests::parses_header", "tests::rounds_refund",
                   "test result: FAILED. 60 passed; 3 failed"), "bash")


def cargo_panic(tmp: Path) -> Output:
    """`cargo run` of a program that panics 40 calls deep, with RUST_BACKTRACE=1."""
    _need(tmp, "cargo", env=_cargo_env(tmp))
    chain_fns = "".join(f"fn step_{i}(n: u32) -> u32 {{ step_{i + 1}(n + 1) }}\n" for i in range(40))
    main = (chain_fns + "fn step_40(n: u32) -> u32 {\n    let v: Vec<u32> = Vec::new();\n    v[n as usize]\n}\n"
            "fn main() {\n    println!(\"{}\", step_0(0));\n}\n")
    proj = _cargo_project(tmp, "demo_panic", "", main)
    env_out = _cargo(tmp, proj, "build")  # compiled first: the run's output is the program's own
    if b"error" in env_out and b"Finished" not in env_out:
        raise RuntimeError(env_out.decode(errors="replace"))
    env = _env(tmp, RUST_BACKTRACE="1")
    out = _run([str(tmp / "target" / "debug" / "demo_panic")], proj, env)
    return Output("cargo-panic", out, "stacktrace",
                  ("panicked at src/main.rs", "index out of bounds: the len is 0 but the index is 40",
                   "./src/main.rs:43:"), "bash")


def javac_errors(tmp: Path) -> Output:
    """javac on three classes with 25 errors between them."""
    _need(tmp, "javac")
    tmp = _fresh(tmp)
    for k in range(3):
        body = "".join(f"    int m{i}() {{ return missing{k}_{i}; }}\n" for i in range(8 + k))
        (tmp / f"Shop{k}.java").write_text(f"public class Shop{k} {{\n{body}}}\n")
    out = _run(["javac", "-Xmaxerrs", "500", *[f"Shop{k}.java" for k in range(3)]], tmp, _env(tmp))
    return Output("javac", out, "build",
                  ("Shop0.java:2: error: cannot find symbol", "symbol:   variable missing0_0",
                   "Shop2.java:11: error: cannot find symbol", "27 errors"), "bash")


JAVA_APP = """\
public class Orders {{
{steps}
    static int parse(String raw) {{
        try {{
            return Integer.parseInt(raw);
        }} catch (NumberFormatException e) {{
            throw new IllegalStateException("order id unreadable: " + raw, e);
        }}
    }}

    public static void main(String[] args) {{
        step0("x12");
    }}
}}
"""


def java_trace(tmp: Path) -> Output:
    """A Java program dying 120 frames deep with a cause (Caused by: …)."""
    _need(tmp, "javac", "java")
    tmp = _fresh(tmp)
    steps = "".join(f"    static int step{i}(String r) {{ return step{i + 1}(r); }}\n" for i in range(120))
    steps += "    static int step120(String r) { return parse(r); }\n"
    (tmp / "Orders.java").write_text(JAVA_APP.format(steps=steps))
    built = _run(["javac", "Orders.java"], tmp, _env(tmp))
    if not (tmp / "Orders.class").exists():
        raise RuntimeError(built.decode(errors="replace"))
    out = _run(["java", "-cp", ".", "Orders"], tmp, _env(tmp))
    return Output("java-trace", out, "stacktrace",
                  ('Exception in thread "main" java.lang.IllegalStateException: order id unreadable: x12',
                   "Caused by: java.lang.NumberFormatException", "at Orders.parse(Orders.java:",
                   "at Orders.main(Orders.java:"), "bash")


def node_crash(tmp: Path) -> Output:
    """node dying in a deep recursion of its own functions (a TypeError)."""
    _need(tmp, "node")
    tmp = _fresh(tmp)
    fns = "".join(f"function layer{i}(o) {{ return layer{i + 1}(o); }}\n" for i in range(60))
    (tmp / "crash.js").write_text(fns + "function layer60(o) { return o.config.port; }\n"
                                  "Error.stackTraceLimit = 100;\nlayer0({});\n")
    out = _run(["node", "crash.js"], tmp, _env(tmp))
    return Output("node-crash", out, "stacktrace",
                  ("TypeError: Cannot read properties of undefined (reading 'port')", "at layer60",
                   "crash.js:61"), "bash")


def node_error_object(tmp: Path) -> Output:
    """node dying on an error with fields (code, errno, details): node prints the object after
    the frames, `{ … }` over many lines."""
    _need(tmp, "node")
    tmp = _fresh(tmp)
    fields = "".join(f"  err.detail_{i} = 'value number {i} of the failed request';\n" for i in range(60))
    (tmp / "errobj.js").write_text(
        "function connect(host) {\n  const err = new Error('connect ECONNREFUSED ' + host);\n"
        "  err.code = 'ECONNREFUSED';\n  err.errno = -111;\n  err.syscall = 'connect';\n"
        f"{fields}  throw err;\n}}\nfunction start() {{ connect('127.0.0.1:5432'); }}\nstart();\n")
    out = _run(["node", "errobj.js"], tmp, _env(tmp))
    return Output("node-error-object", out, "stacktrace",
                  ("Error: connect ECONNREFUSED 127.0.0.1:5432", "at connect", "at start",
                   "code: 'ECONNREFUSED'"), "bash")


def node_rejection(tmp: Path) -> Output:
    """An unhandled promise rejection through 40 async functions."""
    _need(tmp, "node")
    tmp = _fresh(tmp)
    fns = "".join(f"async function hop{i}(n) {{ await null; return await hop{i + 1}(n + 1); }}\n" for i in range(40))
    (tmp / "reject.js").write_text(
        fns + "async function hop40(n) { await null; throw new RangeError('retry budget exhausted after ' + n); }\n"
        "Error.stackTraceLimit = 100;\nhop0(0);\n")
    out = _run(["node", "reject.js"], tmp, _env(tmp))
    return Output("node-rejection", out, "stacktrace",
                  ("RangeError: retry budget exhausted after 40", "at hop40"), "bash")


def _npm(tmp: Path, proj: Path, *args: str) -> bytes:
    cache = tmp / "npm-cache"
    return _run(["npm", *args, "--offline", "--no-update-notifier", "--no-fund", "--no-audit",
                 "--cache", str(cache), "--logs-dir", str(tmp / "npm-logs")], proj, _env(tmp))


def npm_offline(tmp: Path) -> Output:
    """`npm install --offline` of a package the empty cache does not hold (npm 11: `npm error`)."""
    _need(tmp, "npm")
    proj = _fresh(tmp / "app")
    deps = {f"left-pad-{i}": "^1.0.0" for i in range(3)}
    (proj / "package.json").write_text(json.dumps({"name": "app", "version": "1.0.0", "dependencies": deps}))
    out = _npm(tmp, proj, "install", "--loglevel", "verbose")
    return Output("npm-offline", out, "install",
                  ("npm error code ENOTCACHED", "cache mode is 'only-if-cached'"), "bash")


def npm_verbose(tmp: Path) -> Output:
    """`npm install --offline --loglevel silly`: hundreds of `npm silly`/`npm verbose` lines
    before the error (a log, not a directory tree)."""
    _need(tmp, "npm")
    proj = _fresh(tmp / "app")
    deps = {"express": "^4.19.0", "lodash": "^4.17.21", "left-pad": "^1.3.0"}
    (proj / "package.json").write_text(json.dumps({"name": "app", "version": "1.0.0", "dependencies": deps}))
    out = _npm(tmp, proj, "install", "--loglevel", "silly")
    return Output("npm-silly", out, "install",
                  ("npm error code ENOTCACHED", "npm verbose exit 1"), "bash")


def _git(repo: Path, tmp: Path, *args: str) -> bytes:
    return _run(["git", *args], repo, _env(tmp))


def _commit_facts(log: bytes, commits: int) -> tuple[str, ...]:
    """The first `commits` commit ids and every subject of those."""
    text = log.decode()
    ids = [line for line in text.split("\n") if line.startswith("commit ")][:commits]
    subjects = [line.strip() for line in text.split("\n") if line.startswith("    Change ")][:commits]
    return (*ids, *subjects)


def git_history(tmp: Path) -> list[Output]:
    """git log -p, git log --stat, git show, git log --format as CSV, in the generated repo."""
    _need(tmp, "git")
    repo = git_repo(tmp)
    log_p = _git(repo, tmp, "log", "-p", "-12")
    stat = _git(repo, tmp, "log", "--stat")
    show = _git(repo, tmp, "show", "HEAD")
    csv = _git(repo, tmp, "log", "--date=short", "--format=%h,%an,%ad,%s")
    csv_lines = csv.decode().split("\n")
    show_text = show.decode().split("\n")
    return [Output("git-log-p", log_p, "gitlog", _commit_facts(log_p, 3), "bash"),
            Output("git-log-stat", stat, "gitlog", (*_commit_facts(stat, 2), "files changed"), "bash"),
            Output("git-show", show, "gitlog", (show_text[0], "Change 60: bump every module", "src/mod_00.py"),
                   "bash"),
            Output("git-csv", csv, "csv", (csv_lines[0], csv_lines[-2]), "bash")]


def grep_rn(tmp: Path) -> Output:
    """`grep -rn` over a source tree: path:line:text, not a directory listing."""
    _need(tmp, "grep")
    root = _fresh(tmp / "src")
    for k in range(30):
        (root / f"mod_{k:02d}.py").write_text("".join(f"def handler_{k}_{i}(request):\n    return TODO_{i}\n\n"
                                                     for i in range(10)))
    out = _run(["grep", "-rn", "TODO", "."], root, _env(tmp))
    first = out.decode().split("\n")[0]
    return Output("grep-rn", out, "size-head", (first,), "grep")


def _pip(tmp: Path, *args: str) -> bytes:
    env = _env(tmp, PIP_NO_INPUT="1", PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_CONFIG_FILE=os.devnull)
    return _run([sys.executable, "-m", "pip", *args], tmp, env)


def pip_missing(tmp: Path) -> Output:
    """`pip install --no-index` of a package that is nowhere: its verbose run ends in the reason."""
    tmp = _fresh(tmp)
    out = _pip(tmp, "install", "-vvv", "--no-index", "--find-links", str(tmp), "caveman-no-such-package==1.2.3")
    return Output("pip-missing", out, "install",
                  ("Could not find a version that satisfies the requirement caveman-no-such-package==1.2.3",
                   "No matching distribution found for caveman-no-such-package==1.2.3"), "bash")


PYPROJECT = """\
[build-system]
requires = []
build-backend = "backend"
backend-path = ["."]

[project]
name = "fastthing"
version = "0.1"
"""
#: a PEP 517 backend in the source tree (no setuptools or wheel needed offline): it compiles
#: the extension with gcc, as setuptools would, and fails as setuptools does when gcc fails
BACKEND = """\
import subprocess
import sys


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    for unit in ("speedups.c", "fastthing.c"):
        cmd = ["gcc", "-fPIC", "-Wall", "-c", unit, "-o", unit[:-2] + ".o"]
        print("building 'fastthing' extension:", " ".join(cmd), flush=True)
        done = subprocess.run(cmd)
        if done.returncode:
            sys.exit("error: command '/usr/bin/gcc' failed with exit code %d" % done.returncode)
"""


def pip_build_failure(tmp: Path) -> Output:
    """`pip install --no-index --no-build-isolation` of a local C extension whose compile dies
    on a missing header: gcc's `fatal error:` inside pip's `subprocess-exited-with-error`."""
    _need(tmp, "gcc")
    src = _fresh(tmp / "fastthing")
    (src / "pyproject.toml").write_text(PYPROJECT)
    (src / "backend.py").write_text(BACKEND)
    (src / "fastthing.c").write_text("#include <stdio.h>\n#include <libfoo/foo.h>\nint x;\n")
    (src / "speedups.c").write_text("".join(f"int speed_{i}(int a) {{ int unused_{i}; return a; }}\n"
                                            for i in range(20)))
    out = _pip(tmp, "install", "-v", "--no-index", "--no-build-isolation", str(src))
    return Output("pip-build-failure", out, "install",
                  ("fatal error: libfoo/foo.h: No such file or directory", "error: subprocess-exited-with-error",
                   "error: metadata-generation-failed"), "bash")


def pytest_many_failures(tmp: Path) -> Output:
    """A pytest run (-q, the default tb) with 21 failures among 60 passes."""
    suite = _fresh(tmp / "suite")
    (suite / "pytest.ini").write_text("[pytest]\naddopts =\n")
    body = "".join(f"def test_ok_{i}():\n    assert True\n\n" for i in range(60))
    body += "".join(f"def test_bad_{i}():\n    values = list(range({i}))\n    assert len(values) == {i + 1}\n\n"
                    for i in range(21))
    (suite / "test_many.py").write_text(body)
    env = _env(tmp)
    out = _run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly", "test_many.py"],
               suite, env)
    return Output("pytest-many", out, "tests",
                  ("21 failed, 60 passed", "FAILED test_many.py::test_bad_0", "FAILED test_many.py::test_bad_20"),
                  "bash")


def pytest_collection_error(tmp: Path) -> Output:
    """pytest with a module that cannot be imported, beside 300 passing tests."""
    suite = _fresh(tmp / "suite")
    (suite / "pytest.ini").write_text("[pytest]\naddopts =\n")
    (suite / "test_fine.py").write_text("".join(f"def test_ok_{i}():\n    assert True\n\n" for i in range(300)))
    (suite / "test_broken.py").write_text("import json\nfrom collections import NoSuchThing\n\ndef test_x():\n    pass\n")
    out = _run([sys.executable, "-m", "pytest", "-v", "-p", "no:cacheprovider", "-p", "no:randomly",
                "--continue-on-collection-errors"], suite, _env(tmp))
    return Output("pytest-collect", out, "tests",
                  ("ERROR collecting test_broken.py", "ImportError: cannot import name 'NoSuchThing'",
                   "300 passed, 1 error"), "bash")


UNITTEST = """\
import unittest


class Shop(unittest.TestCase):
{tests}
    def test_total(self):
        self.assertEqual(sum([1, 2, 3]), 7, "cart total")

    def test_header(self):
        raise KeyError("X-Request-Id")


if __name__ == "__main__":
    unittest.main()
"""


def unittest_run(tmp: Path) -> Output:
    """`python -m unittest -v`: 200 passes, a failure and an error."""
    tmp = _fresh(tmp)
    tests = "".join(f"    def test_ok_{i}(self):\n        self.assertTrue(True)\n\n" for i in range(200))
    (tmp / "test_shop.py").write_text(UNITTEST.format(tests=tests))
    out = _run([sys.executable, "-m", "unittest", "-v", "test_shop"], tmp, _env(tmp))
    return Output("unittest", out, "tests",
                  ("FAIL: test_total (test_shop.Shop", "ERROR: test_header (test_shop.Shop",
                   "AssertionError: 6 != 7 : cart total", "FAILED (failures=1, errors=1)", "Ran 202 tests"), "bash")


def _module_tool(tmp: Path, module: str, *args: str) -> bytes:
    try:
        __import__(module)
    except ImportError:
        raise Missing(f"{module} is not installed (it is in the test extra)") from None
    return _run([sys.executable, "-m", module, *args], tmp, _env(tmp))


MYPY_MOD = """\
def price_{n}(count: int) -> int:
    label: str = count
    return label


def total_{n}(items: list[int]) -> str:
    return sum(items)

"""


def mypy_run(tmp: Path) -> Output:
    """mypy over three modules with 2 errors per function."""
    tmp = _fresh(tmp / "proj")
    for k in range(3):
        (tmp / f"shop_{k}.py").write_text("".join(MYPY_MOD.format(n=i) for i in range(12)))
    out = _module_tool(tmp, "mypy", "--no-incremental", "--cache-dir", os.devnull, "--no-error-summary",
                       "--hide-error-context", "shop_0.py", "shop_1.py", "shop_2.py")
    out += _module_tool(tmp, "mypy", "--no-incremental", "--cache-dir", os.devnull, "shop_0.py", "shop_1.py",
                        "shop_2.py").rsplit(b"\n", 2)[-2] + b"\n"  # the summary line, as a plain run ends
    first = out.decode().split("\n")[0].split("(")[0].strip()  # mypy orders files its own way
    return Output("mypy", out, "build", (first, "Found 108 errors in 3 files"), "bash")


RUFF_MOD = """\
import os
import sys
from typing import List


def handler_{n}(items: List[int]) -> int:
    unused = 1
    if items == None:
        return 0
    return len(items)

"""


def _ruff_tree(tmp: Path) -> Path:
    tmp = _fresh(tmp / "proj")
    for k in range(20):
        (tmp / f"mod_{k:02d}.py").write_text(RUFF_MOD.format(n=k))
    (tmp / "ruff.toml").write_text('[lint]\nselect = ["E", "F", "UP"]\n')
    return tmp


def ruff_full(tmp: Path) -> Output:
    """`ruff check` in its default (full) format: the location on a `-->` line, a code frame."""
    proj = _ruff_tree(tmp)
    out = _module_tool(proj, "ruff", "check", "--no-cache", ".")
    return Output("ruff-full", out, "lint", ("F401", "mod_00.py:1:8", "E711", "Found "), "bash")


def ruff_concise(tmp: Path) -> Output:
    """`ruff check --output-format concise`: one line per problem."""
    proj = _ruff_tree(tmp)
    out = _module_tool(proj, "ruff", "check", "--no-cache", "--output-format", "concise", ".")
    return Output("ruff-concise", out, "lint", ("F401", "mod_00.py:1:8", "E711", "Found "), "bash")


def ruff_syntax(tmp: Path) -> Output:
    """`ruff check` over files that do not parse: invalid-syntax diagnostics among rule hits."""
    proj = _ruff_tree(tmp)
    for k in range(5):
        (proj / f"broken_{k}.py").write_text(f"def broken_{k}(:\n    return (\n")
    out = _module_tool(proj, "ruff", "check", "--no-cache", "--output-format", "concise", ".")
    return Output("ruff-syntax", out, "lint", ("broken_0.py:1:", "F401"), "bash")


def _tree(root: Path, dirs: int, files: int) -> Path:
    for d in range(dirs):
        sub = root / f"pkg_{d:02d}" / "src" / f"mod_{d:02d}"
        sub.mkdir(parents=True, exist_ok=True)
        for f in range(files):
            (sub / f"file_{f:03d}.py").write_text("")
    return root


def find_big(tmp: Path) -> Output:
    """`find` over a big tree: 60 packages x 3 folders, 12,000 files (with totals kept)."""
    _need(tmp, "find")
    root = _tree(_fresh(tmp / "big"), 60, 200)
    out = _run(["find", "."], root, _env(tmp))
    lines = [line for line in out.decode().split("\n") if line]
    first_folder = next(line for line in lines if "/file_" in line).rpartition("/")[0]  # in find's order
    # (its first line, `.`, is the folder searched: no entry)
    return Output("find-big", out, "tree", (f"{len(lines) - 1:,} entries", first_folder), "find")


def find_system(tmp: Path) -> Output:
    """`find` of a system folder of this machine (/usr/include or /usr/share/zoneinfo)."""
    _need(tmp, "find")
    for where in ("/usr/include", "/usr/share/zoneinfo", "/usr/lib/python3"):
        if Path(where).is_dir():
            break
    else:
        raise Missing("no /usr/include, /usr/share/zoneinfo or /usr/lib/python3 to list")
    out = _run(["find", where], Path(where), _env(tmp))
    total = len([line for line in out.decode("utf-8", "replace").split("\n") if line]) - 1
    return Output("find-system", out, "tree", (f"{total:,} entries", where + "/"), "find")


def ls_long_recursive(tmp: Path) -> Output:
    """`ls -laR` of a tree: per folder a `total` line, then long entries (mode, owner, size, date)."""
    _need(tmp, "ls")
    root = _tree(_fresh(tmp / "lsr"), 12, 25)
    out = _run(["ls", "-laR", "."], root, _env(tmp))
    return Output("ls-laR", out, "tree", ("./pkg_00/src/mod_00", "./pkg_11/src/mod_11", "file_000.py"), "bash")


def ls_recursive(tmp: Path) -> Output:
    """`ls -R` of the same kind of tree."""
    _need(tmp, "ls")
    root = _tree(_fresh(tmp / "lsR"), 30, 40)
    out = _run(["ls", "-R", "."], root, _env(tmp))
    return Output("ls-R", out, "tree", ("./pkg_00/src/mod_00", "./pkg_05/src/mod_05"), "bash")


LOGGING_APP = """\
import json
import logging
import random
import sys

rng = random.Random(11)
log = logging.getLogger("billing")
handler = logging.StreamHandler(sys.stdout)
handler.setFormatter({formatter})
log.addHandler(handler)
log.setLevel(logging.DEBUG)
for i in range(3000):
    roll = rng.random()
    if i in (777, 1999, 2650):
        log.error("charge %d failed: card_declined for customer cus_%d", i, i * 7)
    elif roll < 0.03:
        log.warning("charge %d slow: %d ms", i, 800 + i % 300)
    elif roll < 0.5:
        log.info("charge %d ok: amount=%d currency=eur", i, i % 97)
    else:
        log.debug("cache hit for customer cus_%d in eu-west-1", i * 7)
"""
_PLAIN = 'logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")'  # asctime: "…09:46:34,789"
_JSONL = """type("J", (logging.Formatter,), {"format": lambda self, r: json.dumps(
    {"time": self.formatTime(r), "level": r.levelname, "logger": r.name, "message": r.getMessage()})})()"""


def python_logging(tmp: Path, ndjson: bool = False) -> Output:
    """A Python program's `logging` output (one comma in every line, in the time: not a CSV), or
    the same records as NDJSON (one JSON object a line, as many commas: not a CSV either)."""
    tmp = _fresh(tmp)
    (tmp / "billing.py").write_text(LOGGING_APP.format(formatter=_JSONL if ndjson else _PLAIN))
    out = _run([sys.executable, "billing.py"], tmp, _env(tmp))
    facts = _lines_with(out, "charge 777 failed", "charge 1999 failed", "charge 2650 failed")
    return Output("ndjson-log" if ndjson else "python-logging", out, "log", facts, "bash")


def binary_file(tmp: Path) -> Output:
    """A compiled program's bytes (an ELF made by gcc), read as a tool's output."""
    _need(tmp, "gcc")
    tmp = _fresh(tmp)
    (tmp / "hello.c").write_text("#include <stdio.h>\nint main(void) { puts(\"hi\"); return 0; }\n")
    _run(["gcc", "-O0", "-g", "hello.c", "-o", "hello"], tmp, _env(tmp))
    if not (tmp / "hello").exists():
        raise Missing("gcc could not link a program here")
    return Output("binary", (tmp / "hello").read_bytes(), "binary", ("[binary:",), "read_file")


def python_source(tmp: Path) -> Output:
    """A real Python module of this machine's standard library, read as a file."""
    import argparse

    path = Path(argparse.__file__)
    return Output("python-source", path.read_bytes(), "code", ("class ArgumentParser", "import sys"), "read_file")


def c_source(tmp: Path) -> Output:
    """A generated C file of 40 functions, read as a file."""
    body = "#include <stdio.h>\n#include <stdlib.h>\n\n" + "".join(
        f"static int compute_{i}(int a, int b)\n{{\n    int r = a * {i} + b;\n"
        + "".join(f"    r += (a ^ {k}) % (b + {k + 1});\n" for k in range(12)) + "    return r;\n}\n\n"
        for i in range(40))
    return Output("c-source", body.encode(), "code", ("#include <stdio.h>", "static int compute_0(int a, int b)",
                                                      "static int compute_39(int a, int b)"), "read_file")


#: the corpus of issue 17, every maker run once per call
REAL_MAKERS: Final[tuple[Callable[[Path], Output], ...]] = (
    gcc_mid_errors, gcc_color, gcc_link, make_keep_going, make_recursive,
    cargo_errors, cargo_warnings, cargo_test, cargo_panic,
    javac_errors, java_trace, node_crash, node_error_object, node_rejection, npm_offline, npm_verbose,
    grep_rn, pip_missing, pip_build_failure, pytest_many_failures, pytest_collection_error, unittest_run,
    mypy_run, ruff_full, ruff_concise, ruff_syntax, find_big, find_system, ls_long_recursive, ls_recursive,
    python_logging, partial(python_logging, ndjson=True), binary_file, python_source, c_source,
)


def corpus(tmp: Path) -> tuple[list[Output], dict[str, str]]:
    """Every real output this machine can make (the ones `fixtures` runs, then the makers
    above), and {maker: why it was skipped} for those whose tool is missing."""
    made = [pytest_run(tmp / "pytest"), traceback_run(tmp / "tb"), deep_traceback_run(tmp / "deep"),
            *git_outputs(tmp / "git"), find_tree(tmp / "find")]
    skipped: dict[str, str] = {}
    try:
        made += git_history(tmp / "git-history")
    except Missing as exc:
        skipped["git_history"] = str(exc)
    for k, maker in enumerate(REAL_MAKERS):
        name = getattr(maker, "__name__", None) or maker.func.__name__ + "_ndjson"  # type: ignore[attr-defined]
        try:
            made.append(maker(tmp / f"{k:02d}-{name}"))
        except Missing as exc:
            skipped[name] = str(exc)
    return made, skipped


_SHARED: list[tuple[list[Output], dict[str, str]]] = []


def shared_corpus(folder: Callable[[], Path]) -> tuple[list[Output], dict[str, str]]:
    """`corpus`, made once per process, in the folder `folder()` gives the first caller: the
    tests and benchmarks that read it share one making (each made its own: ~13 s apiece)."""
    if not _SHARED:
        _SHARED.append(corpus(folder()))
    made, skipped = _SHARED[0]
    return list(made), dict(skipped)

