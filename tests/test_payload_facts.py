"""Facts a view keeps while it has room (issue 17): real outputs made at test time
(caveman_batch/testing/fact_outputs.py), each with the strings a user acts on."""

from __future__ import annotations

import random
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from caveman_batch import ccr
from caveman_batch.payload import Budget, Hint, reduce
from caveman_batch.store import Store, open_store
from caveman_batch.testing import fact_outputs as fo
from test_payload import check_laws
from test_payload_real import skip_or_fail

NAMES = ("minified-bundle", "pip-no-match", "pytest-many", "unittest", "logging-traceback", "logging-repeats", "c-source", "python-source",
         "ci-json", "malformed-csv", "pip-list", "esbuild", "cargo-mismatched", "gcc-build", "ruff-syntax",
         "binary-ELF", "binary-PNG", "binary-gzip", "binary-zip")


#: {generator: why its output was not made}, filled by `outputs`
SKIPPED: dict[str, str] = {}


@pytest.fixture(scope="module")
def outputs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, fo.Output]:
    return {o.name: o for o in fo.fixtures(tmp_path_factory.mktemp("fact-outputs"), SKIPPED)}


@pytest.fixture
def store() -> Iterator[Store]:
    with open_store("memory://") as s:
        yield s


def _output(outputs: dict[str, fo.Output], name: str) -> fo.Output:
    if name not in outputs:
        maker = "binaries" if name.startswith("binary-") else name.replace("-", "_")  # cargo_mismatched, ...
        why = next((why for key, why in SKIPPED.items() if maker in key), "its tool is absent or cannot run here")
        skip_or_fail(f"{name}: {why}")
    return outputs[name]


def _hint(out: fo.Output) -> Hint:
    return Hint(tool=out.tool, path=out.path)


@pytest.mark.parametrize("budget", (2_000, 20_000))
@pytest.mark.parametrize("name", NAMES)
def test_real_output_keeps_its_facts_and_the_laws(outputs: dict[str, fo.Output], name: str, budget: int,
                                                  store: Store) -> None:
    out = _output(outputs, name)
    result = reduce(out.data, _hint(out), Budget(budget), store)
    text = out.data.decode("utf-8", "replace")
    # an output that fits comes back whole: the facts a cut writes (counts) are not in it
    facts = [f for f in out.facts if result.strategy != "none" or f in text]
    missing = [f for f in facts if f not in result.content]
    assert not missing, f"{name} ({result.strategy} cut) lost {missing}:\n{result.content}"
    check_laws(text, Budget(budget), result, _hint(out))
    if result.strategy != "none":
        assert result.handle is not None and ccr.recover(store, result.handle) == out.data


def test_an_over_long_line_is_cut_to_the_room_left_with_its_omission_counted(
        outputs: dict[str, fo.Output]) -> None:
    out = _output(outputs, "minified-bundle")
    bundle = out.data.decode().split("\n")[1]
    view = reduce(out.data, _hint(out), Budget(2_000)).content
    line = view.split("\n")[1]
    kept, omitted = re.fullmatch(r"(.*) \[… ([\d,]+) chars omitted\]", line).groups()  # type: ignore[union-attr]
    assert bundle.startswith(kept) and len(kept) + int(omitted.replace(",", "")) == len(bundle)
    assert len(view) > 1_700  # the room is used, not left empty


@pytest.mark.parametrize("name", ("binary-ELF", "binary-PNG", "binary-gzip", "binary-zip"))
def test_binary_input_gets_its_size_type_and_handle(outputs: dict[str, fo.Output], name: str,
                                                    store: Store) -> None:
    out = _output(outputs, name)
    result = reduce(out.data, None, Budget(2_000), store)
    body, footer = result.content.split("\n")
    assert result.strategy == "binary"
    assert body == f"[binary: {len(out.data):,} bytes, {name.split('-')[1]}]"
    assert result.handle is not None and result.handle in footer


def test_passes_are_counted_from_the_run_not_from_ok_in_its_output(outputs: dict[str, fo.Output]) -> None:
    out = _output(outputs, "pytest-many")
    assert out.data.count(b"ok ") > 600  # what the old count took for passes
    view = reduce(out.data, _hint(out), Budget(2_000)).content
    assert view.startswith("[tests cut: 60 passing tests omitted;")
    assert view.index("short test summary info") < view.index("FAILED test_many.py::test_fail_0")


def test_python_outline_puts_top_level_definitions_before_methods(outputs: dict[str, fo.Output]) -> None:
    out = _output(outputs, "python-source")
    view = reduce(out.data, _hint(out), Budget(2_000)).content
    assert "def entry_point_9(argv):" in view and "method_24" not in view


def test_csv_names_its_malformed_rows_by_line(outputs: dict[str, fo.Output]) -> None:
    out = _output(outputs, "malformed-csv")
    view = reduce(out.data, _hint(out), Budget(2_000)).content
    assert view.startswith("[csv cut: 3,000 rows of 4 fields; 2 malformed (another field count) at lines 1,202, 2,403]")
    assert '"Lyon, FR"' in out.data.decode()  # a quoted delimiter is not a malformed row


def test_identical_errors_are_grouped_with_a_count_and_places_so_a_distinct_one_shows(
        outputs: dict[str, fo.Output]) -> None:
    out = _output(outputs, "cargo-mismatched")
    view = reduce(out.data, _hint(out), Budget(2_000)).content
    assert view.startswith("[×30 error[E0308]: mismatched types; at src/lib.rs:2:18, src/lib.rs:7:18, "
                           "src/lib.rs:12:18, src/lib.rs:17:18 and 26 more]")
    assert "152 |     undefined_total + 1" in view  # the distinct error's frame outranks the repeats
    assert "error[E0425]: cannot find value `undefined_total` in this scope\n   --> src/lib.rs:" in view


def test_bytes_with_no_magic_are_data_only_when_they_look_binary(tmp_path: Path) -> None:
    noise = random.Random(11).randbytes(6_000)
    assert reduce(noise, None, Budget(2_000)).content.startswith("[binary: 6,000 bytes, data]")
    log = fo.logging_traceback(tmp_path).data
    stray = log[:500] + b"\x00\xff" + log[500:]  # a log with a stray NUL and a bad byte is still a log
    result = reduce(stray, Hint(tool="bash"), Budget(2_000))
    assert result.strategy == "log" and "KeyError: 'customer_id'" in result.content
