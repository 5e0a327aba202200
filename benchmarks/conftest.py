"""Seeded, realistic tool catalogs for the benchmarks, and whether they are really timed.

The catalogs look like MCP `tools/list` responses (names, prose descriptions with
rules and defaults, JSON Schemas with enums and bounds) and compress with zstd
level 3 to about 17% of their size, as the real catalogs in shared/corpora do
(medians 17-25%). They are deterministic: the same seed gives the same bytes on
any machine.
"""

from __future__ import annotations

import functools
import json
import random

import pytest

_WORDS = (
    "repository issue pull request branch commit release label comment review workflow run tag "
    "milestone discussion ticket queue agent macro attachment customer invoice payment refund "
    "subscription plan product price coupon order shipment warehouse item stock record table row "
    "column index query schema document folder file page block database channel message thread "
    "user team member role permission token secret key environment deployment service cluster "
    "node pod volume snapshot backup alert incident metric dashboard event log trace span"
).split()
_VERBS = ("list", "get", "create", "update", "delete", "search", "merge", "archive", "restore",
          "assign", "close", "reopen", "export", "import", "sync", "move", "copy", "lock")
_LEADS = (
    "{Verb} a {res} in the given {parent}.",
    "{Verb} {ress} that match the filters, newest first.",
    "Use this tool to {verb} one {res} by its identifier.",
    "{Verb} every {res} the authenticated user can see in a {parent}.",
)
_MORE = (
    "Returns at most {n} {ress} per page; pass the cursor from the previous response to continue.",
    "Requires the {perm} permission on the {parent}.",
    "Do not use this tool to {verb2} {ress}; use {other} instead.",
    "The {field} must be between {lo} and {hi} characters long.",
    "Defaults to {dv} when omitted.",
    "Times are ISO 8601 in UTC, for example 2024-05-01T12:00:00Z.",
    "This is a destructive action and cannot be undone.",
    "Results are cached for {n} seconds, so a {res} created just now may not appear yet.",
    "When {field} is set, {ress} without a {field2} are skipped.",
    "Only available on the {plan} plan; other plans get a 403 error.",
)
_PLANS = ("free", "team", "business", "enterprise")
_TYPES = ("string", "integer", "boolean", "number", "array")


def _sentence(rng: random.Random, template: str, names: list[str]) -> str:
    res, res2, parent = rng.choice(_WORDS), rng.choice(_WORDS), rng.choice(_WORDS)
    verb, verb2 = rng.choice(_VERBS), rng.choice(_VERBS)
    lo = rng.randint(1, 50)
    return template.format(
        res=res, ress=res + "s", parent=parent, verb=verb, Verb=verb.capitalize(), verb2=verb2,
        n=rng.choice((10, 25, 50, 100, 500)), perm=f"{res}:{rng.choice(('read', 'write', 'admin'))}",
        other=rng.choice(names), field=f"{res}_{rng.choice(_WORDS)}", field2=f"{res2}_id",
        lo=lo, hi=lo + rng.randint(10, 5000), dv=rng.choice(('"open"', "30", "false", '"desc"')),
        plan=rng.choice(_PLANS),
    )


def _description(rng: random.Random, names: list[str], extra: int) -> str:
    parts = [_sentence(rng, rng.choice(_LEADS), names)]
    parts += [_sentence(rng, rng.choice(_MORE), names) for _ in range(extra)]
    return " ".join(parts)


def _param(rng: random.Random, names: list[str]) -> dict[str, object]:
    kind = rng.choice(_TYPES)
    schema: dict[str, object] = {"type": kind, "description": _description(rng, names, rng.randint(0, 2))}
    if kind == "string" and rng.random() < 0.3:
        schema["enum"] = rng.sample(_WORDS, rng.randint(2, 6))
    elif kind == "integer":
        schema.update(minimum=rng.randint(0, 1), maximum=rng.choice((100, 1000, 2**31 - 1)))
    elif kind == "array":
        schema["items"] = {"type": "string", "minLength": 1}
    if rng.random() < 0.3:
        schema["default"] = rng.choice((10, "all", False, "desc"))
    return schema


def _tool(rng: random.Random, name: str, names: list[str]) -> dict[str, object]:
    params = {f"{rng.choice(_WORDS)}_{rng.choice(('id', 'name', 'state', 'limit', 'cursor', 'sort'))}"
              for _ in range(rng.randint(1, 7))}
    properties = {p: _param(rng, names) for p in sorted(params)}
    return {
        "name": name,
        "description": _description(rng, names, rng.randint(1, 6)),
        "inputSchema": {
            "type": "object", "properties": properties,
            "required": sorted(rng.sample(sorted(params), rng.randint(0, len(params)))),
            "additionalProperties": False,
        },
        "annotations": {"readOnlyHint": name.startswith(("list", "get", "search"))},
    }


@functools.cache
def _base_catalog(seed: int, size: int) -> str:
    """A tools/list JSON document of about `size` bytes; `@@V@@` marks the variant slots."""
    rng = random.Random(seed)
    names = [f"{rng.choice(_VERBS)}_{rng.choice(_WORDS)}_{i}" for i in range(200)]
    tools: list[dict[str, object]] = []
    text = ""
    while len(text) < size:
        tools.append(_tool(rng, names[len(tools)], names))
        text = json.dumps({"server": "@@V@@", "tools": tools}, indent=2, ensure_ascii=False)
    return text


def catalog(n: int, size: int = 20_000, bases: int = 16) -> bytes:
    """The n-th distinct catalog: one of `bases` seeded documents with its own server name."""
    return _base_catalog(n % bases, size).replace("@@V@@", f"server-{n:08d}").encode()


def catalogs(start: int, count: int, size: int = 20_000) -> list[bytes]:
    return [catalog(n, size) for n in range(start, start + count)]


class Catalogs:
    """What the `catalogs` fixture hands out (benchmark modules do not import conftest)."""

    one = staticmethod(catalog)
    many = staticmethod(catalogs)


@pytest.fixture(scope="session", name="catalogs")
def catalogs_fixture() -> type[Catalogs]:
    return Catalogs


@pytest.fixture(scope="session")
def benchmarks_enabled(request: pytest.FixtureRequest) -> bool:
    """False in the normal test run (--benchmark-disable): then each benchmark runs once, small."""
    config = request.config  # the same rule pytest-benchmark applies
    return bool(config.getoption("benchmark_enable") or not config.getoption("benchmark_disable"))


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> None:
    """Print the derived figures (MB/s, latency) that pytest-benchmark keeps in extra_info."""
    session = getattr(config, "_benchmarksession", None)
    timed = [b for b in getattr(session, "benchmarks", []) if getattr(b, "extra_info", None)]
    if not timed:
        return
    terminalreporter.section("benchmark figures (median round)")
    for bench in timed:
        figures = ", ".join(f"{k}={v}" for k, v in bench.extra_info.items())
        terminalreporter.write_line(f"{bench.name}: {figures}")
