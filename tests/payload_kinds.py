"""Over-budget text of every kind a payload cut knows, from a seeded random source.

For the laws: random lines alone are rarely over budget, so they never reached the cuts.
Each maker returns the lines of one kind of tool output, about `n` of them.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable

_WORDS = ["alpha", "beta", "gamma", "delta", "omega", "kappa", "sigma", "theta"]


def _w(r: random.Random, n: int = 3) -> str:
    return " ".join(r.choice(_WORDS) for _ in range(n))


def diff(r: random.Random, n: int) -> list[str]:
    out = []
    for f in range(max(2, n // 15)):
        out += [f"diff --git a/src/m{f}.py b/src/m{f}.py",
                f"index {r.getrandbits(28):07x}..{r.getrandbits(28):07x} 100644",
                f"--- a/src/m{f}.py", f"+++ b/src/m{f}.py", f"@@ -{f * 10 + 1},7 +{f * 10 + 1},8 @@ def f{f}():"]
        out += [r.choice(" +- ") + f"    x{i} = {_w(r)}" for i in range(10)]
    return out


def tests(r: random.Random, n: int) -> list[str]:
    out = ["============================= test session starts ==============================",
           "platform linux -- Python 3.11.7, pytest-8.0.0", f"collected {n} items", ""]
    failed = [i for i in range(n) if r.random() < 0.05]
    out += [f"tests/test_m{i % 7}.py::test_{_w(r, 1)}_{i} {'FAILED' if i in failed else 'PASSED'}"
            for i in range(n)]
    out.append("=================================== FAILURES ===================================")
    for i in failed:
        out += [f"___________________________ test_x_{i} ___________________________",
                f"    def test_x_{i}():", f">       assert {i} == {i + 1}", f"E       assert {i} == {i + 1}",
                f"tests/test_m{i % 7}.py:{i}: AssertionError"]
    out.append(f"=========== {len(failed)} failed, {n - len(failed)} passed in 1.23s ===========")
    return out


def lint(r: random.Random, n: int) -> list[str]:
    codes = ["F401", "E501", "W291", "E711"]
    return [f"src/m{i % 9}.py:{i + 1}:{r.randint(1, 80)}: {r.choice(codes)} {_w(r)}"
            for i in range(n)] + [f"Found {n} errors."]


def build(r: random.Random, n: int) -> list[str]:
    out = []
    for i in range(n):
        if r.random() < 0.1:
            out += [f"src/m{i % 5}.c:{i + 1}:{r.randint(1, 40)}: error: '{_w(r, 1)}' undeclared",
                    f"  {i + 1} |   int y = {_w(r, 1)};", "      |           ^~~~"]
        else:
            out.append(f"gcc -O2 -c src/m{i}.c -o build/m{i}.o")
    return out + ["make: *** [Makefile:12: all] Error 1"]


def stacktrace(r: random.Random, n: int) -> list[str]:
    out = ["Traceback (most recent call last):"]
    for i in range(n // 2):
        out += [f'  File "/app/src/m{i % 9}.py", line {i + 10}, in f{i}', f"    return f{i + 1}(x)"]
    return out + [f"ValueError: {_w(r, 6)}"]


def json_(r: random.Random, n: int) -> list[str]:
    items = [{"id": i, "name": _w(r), "tags": [_w(r, 1)] * 3, "ok": r.random() > 0.1}
             for i in range(max(n // 8, 20))]
    return json.dumps({"items": items}, indent=2).split("\n")


def gitlog(r: random.Random, n: int) -> list[str]:
    out = []
    for i in range(n // 6):
        out += [f"commit {r.getrandbits(160):040x}",
                f"Author: {_w(r, 1).title()} <{_w(r, 1)}@example.org>",
                f"Date:   Mon Nov {i % 28 + 1} 10:00:00 2026 +0000", "", f"    {_w(r, 5)}", ""]
    return out


def install(r: random.Random, n: int) -> list[str]:
    out = [r.choice([f"Collecting pkg{i}>=1.0", f"  Downloading pkg{i}-1.0-py3-none-any.whl (12 kB)",
                     f"Requirement already satisfied: dep{i} in /usr/lib"]) for i in range(n)]
    return out + ["Successfully installed " + " ".join(f"pkg{i}-1.0" for i in range(5))]


def csv(r: random.Random, n: int) -> list[str]:
    return ["id,name,score,city"] + [f"{i},{_w(r, 1)},{r.randint(0, 99)},{_w(r, 1)}" for i in range(n)]


def log(r: random.Random, n: int) -> list[str]:
    levels = ["INFO", "INFO", "INFO", "DEBUG", "WARN", "ERROR"]
    return [f"2026-11-{i % 28 + 1:02d}T10:{i % 60:02d}:00Z {r.choice(levels)} [worker-{i % 4}] {_w(r, 5)}"
            for i in range(n)]


def tree(r: random.Random, n: int) -> list[str]:
    return [f"./pkg_{i % 12}/sub_{i % 5}/file_{r.randint(0, 9)}{i}.txt" for i in range(n)]


def repeat(r: random.Random, n: int) -> list[str]:
    out: list[str] = []
    while len(out) < n:
        out += [f"waiting for {_w(r, 1)} ..."] * r.randint(5, 40)
    return out


def code(r: random.Random, n: int) -> list[str]:
    out = ["import os", "import sys", ""]
    for i in range(n // 6):
        out += [f"def f{i}(x, y):", f'    """{_w(r)}."""', f"    z = x + {i}", "    return z * y", "", ""]
    return out


# kind -> maker; the kind is also the name of the cut it is meant for
KINDS: dict[str, Callable[[random.Random, int], list[str]]] = {
    "diff": diff, "tests": tests, "lint": lint, "build": build, "stacktrace": stacktrace,
    "json": json_, "gitlog": gitlog, "install": install, "csv": csv, "log": log, "tree": tree,
    "repeat": repeat, "code": code,
}
