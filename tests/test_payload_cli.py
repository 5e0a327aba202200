"""`caveman-batch payload compress|retrieve` in-process and through the installed entry point."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from caveman_batch import cli
from caveman_batch.testing import payload_outputs as po


def _run(capsysbinary: pytest.CaptureFixture[bytes], *args: str) -> tuple[int, bytes, str]:
    code = cli.main(list(args))
    out, err = capsysbinary.readouterr()
    return code, out, err.decode("utf-8", "replace")


def _handle(view: bytes) -> str:
    return view.decode().rstrip("\n").rsplit("payload retrieve ", 1)[1].rstrip("]")


@pytest.fixture
def store_url(tmp_path: Path) -> str:
    return f"lmdb://{tmp_path / 'ccr.lmdb'}"


ORIGINALS = {
    "crlf": b"".join(b"2026-01-01 INFO line %d\r\n" % i for i in range(3000)) + b"2026 ERROR boom\r\n",
    "no-final-newline": b"\n".join(b"plain %d" % i for i in range(3000)),
    "invalid-utf8": b"\xff\xfe\x00 head\n" + b"caf\xe9 %d\n" * 3000 + b"\xc3 tail",
}


@pytest.mark.parametrize("name", sorted(ORIGINALS))
def test_compress_then_retrieve_is_byte_exact_whole_and_sliced(
        capsysbinary: pytest.CaptureFixture[bytes], tmp_path: Path, store_url: str, name: str) -> None:
    raw = ORIGINALS[name]
    src = tmp_path / "out.txt"
    src.write_bytes(raw)
    code, view, err = _run(capsysbinary, "payload", "compress", str(src), "--max-chars", "2000",
                           "--tool", "bash", "--store", store_url)
    assert code == 0 and len(view.decode().rstrip("\n")) <= 2000
    assert "handle ccr_" in err
    handle = _handle(view)
    assert _run(capsysbinary, "payload", "retrieve", handle, "--store", store_url)[1] == raw
    assert _run(capsysbinary, "recover", handle, "--store", store_url)[1] == raw
    lines = raw.split(b"\n")
    with_ends = [line + b"\n" for line in lines[:-1]] + ([lines[-1]] if lines[-1] else [])
    for spec, expect in (("2:4", with_ends[1:4]), ("1:1", with_ends[:1]),
                         (f"{len(with_ends)}:", with_ends[-1:]), ("2999:99999", with_ends[2998:])):
        code, out, _ = _run(capsysbinary, "payload", "retrieve", handle, "--lines", spec, "--store", store_url)
        assert code == 0 and out == b"".join(expect), spec


def test_a_short_file_not_utf8_is_shown_and_its_bytes_kept(
        capsysbinary: pytest.CaptureFixture[bytes], tmp_path: Path, store_url: str) -> None:
    raw = b"ok\nresult: caf\xe9\n"
    src = tmp_path / "latin1.txt"
    src.write_bytes(raw)
    code, out, _ = _run(capsysbinary, "payload", "compress", str(src), "--json",
                        "--store", store_url)
    envelope = json.loads(out)
    assert code == 0 and envelope["strategy"] == "decoded" and envelope["handle"]
    assert envelope["content"].startswith("ok\nresult: caf\ufffd\n\n[caveman-batch: ")
    assert _run(capsysbinary, "payload", "retrieve", envelope["handle"],
                "--store", store_url)[1] == raw


@pytest.mark.parametrize("spec", ["0:3", "5:2", "x", "1-3", "99999:", "9" * 5000 + ":",
                                  "\u0661:\u0662", "00:1"])
def test_bad_line_ranges_are_usage_errors(
        capsysbinary: pytest.CaptureFixture[bytes], tmp_path: Path, store_url: str, spec: str) -> None:
    src = tmp_path / "log.txt"
    src.write_bytes(ORIGINALS["crlf"])
    _, view, _ = _run(capsysbinary, "payload", "compress", str(src), "--max-chars", "2000", "--store", store_url)
    code, out, err = _run(capsysbinary, "payload", "retrieve", _handle(view), "--lines", spec, "--store", store_url)
    assert code == 1 and out == b"" and "line" in err


def test_json_envelope(capsysbinary: pytest.CaptureFixture[bytes], tmp_path: Path, store_url: str) -> None:
    src = tmp_path / "tsc.txt"
    src.write_bytes(po.tsc_output().data)
    code, out, _ = _run(capsysbinary, "payload", "compress", str(src), "--json", "--max-chars", "2000",
                        "--store", store_url)
    doc = json.loads(out)
    assert code == 0 and doc["strategy"] == "build" and doc["handle"].startswith("ccr_")
    assert doc["content"].endswith(doc["handle"] + "]")
    assert doc["stats"]["chars_after"] == len(doc["content"]) <= 2000


def test_unknown_handle_and_bad_budget(capsysbinary: pytest.CaptureFixture[bytes], tmp_path: Path,
                                       store_url: str) -> None:
    src = tmp_path / "small.txt"
    src.write_bytes(b"fits\n")
    assert _run(capsysbinary, "payload", "compress", str(src), "--store", store_url)[1] == b"fits\n"
    assert _run(capsysbinary, "payload", "retrieve", "ccr_" + "ab" * 32, "--store", store_url)[0] == 1
    assert _run(capsysbinary, "payload", "retrieve", "../etc", "--store", store_url)[0] == 1
    assert _run(capsysbinary, "payload", "compress", str(src), "--max-chars", "10")[0] == 1


@pytest.mark.parametrize(("option", "value", "least"), [("--max-chars", "399", 400),
                                                   ("--max-lines", "4", 5),
                                                   ("--max-line-chars", "255", 256)])
def test_a_budget_below_its_floor_names_the_option(
        capsysbinary: pytest.CaptureFixture[bytes], tmp_path: Path, store_url: str,
        option: str, value: str, least: int) -> None:
    src = tmp_path / "small.txt"
    src.write_bytes(b"fits\n")
    code, out, err = _run(capsysbinary, "payload", "compress", str(src), option, value,
                          "--store", store_url)
    assert code == 1 and out == b""
    assert f"{option} {value}: must be at least {least}" in err
    assert not (tmp_path / "ccr.lmdb").exists()  # refused before the store is opened


def _entry_point() -> Path:
    found = Path(sys.executable).parent / "caveman-batch"
    if not found.exists():
        pytest.skip("caveman-batch entry point not installed beside this interpreter")
    return found


def test_installed_entry_point_compress_stdin_and_retrieve(tmp_path: Path, store_url: str) -> None:
    exe = _entry_point()
    raw = po.service_log(3000).data
    done = subprocess.run([str(exe), "payload", "compress", "-", "--max-chars", "2000", "--store", store_url],
                          input=raw, capture_output=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert b"(log cut)" in done.stdout and b"log cut" in done.stderr
    back = subprocess.run([str(exe), "payload", "retrieve", _handle(done.stdout), "--store", store_url],
                          capture_output=True, timeout=60, check=False)
    assert back.returncode == 0 and back.stdout == raw


def test_a_line_number_of_any_length_is_read_without_a_traceback() -> None:
    """int() of over 4,300 digits raised (a traceback, exit 2); Arabic-Indic digits were
    read as 1:2."""
    from caveman_batch.payload.retrieve import parse_lines

    assert parse_lines("2:" + "9" * 5000) == (2, 10**18)
    assert parse_lines("007") == (7, 7)


def test_a_line_past_the_end_names_the_count_in_words() -> None:
    from caveman_batch.errors import UsageError
    from caveman_batch.payload.retrieve import slice_lines

    with pytest.raises(UsageError, match="the original has 1 line$"):
        slice_lines(b"one line\n", 2, None)
    with pytest.raises(UsageError, match="the original has 2 lines$"):
        slice_lines(b"one\ntwo", 3, None)
