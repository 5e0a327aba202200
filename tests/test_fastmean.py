"""The C mean of token vectors (_fastmean.mean_rows) is the embedder's Python loop, byte for
byte: on every tool text of the corpora and on random texts; outside what it handles it
returns None and the Python loop runs."""

from __future__ import annotations

import json
from array import array
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from caveman_batch import _accel
from caveman_batch.embedding import EMBED_EXTRA_HINT, extra_installed, load_embedder
from caveman_batch.toolsearch import tool_docs
from caveman_batch.toolvectors import embed_text

pytestmark = [
    pytest.mark.skipif(not extra_installed(), reason=f"embed extra not installed: {EMBED_EXTRA_HINT}"),
    pytest.mark.skipif(_accel.fastmean is None, reason="the C accelerator _fastmean is not built"),
]


@pytest.fixture(scope="module")
def embedder():  # the real one, its table loaded
    embedder = load_embedder(required=True)
    embedder.encode(["warm"])
    return embedder


def _python(embedder, texts: list[str]):
    fast = _accel.fastmean
    _accel.fastmean = None
    try:
        return embedder.encode(texts)
    finally:
        _accel.fastmean = fast


def _corpus_texts(corpora: Path) -> list[str]:
    texts = []
    for path in sorted(corpora.rglob("*.json")):
        try:
            doc = json.loads(path.read_bytes())
        except ValueError:
            continue
        tools = doc.get("tools") if isinstance(doc, dict) else None
        if isinstance(tools, list) and all(isinstance(t, dict) for t in tools):
            texts += [embed_text(d.fields)
                      for d in tool_docs("s", tools, tools, [None] * len(tools))]
    return texts


def test_equal_to_python_on_the_corpora(embedder, corpora: Path) -> None:
    texts = _corpus_texts(corpora)
    assert len(texts) > 5000
    assert embedder.encode(texts).tobytes() == _python(embedder, texts).tobytes()


@settings(max_examples=60, deadline=None)
@given(st.lists(st.text(alphabet=st.characters(codec="utf-8"), max_size=300), max_size=12))
def test_equal_to_python_on_random_texts(embedder, texts: list[str]) -> None:
    assert embedder.encode(texts).tobytes() == _python(embedder, texts).tobytes()


def test_outside_what_it_handles_it_writes_nothing_to_keep(embedder) -> None:
    import numpy as np

    table, _ = embedder._loaded()
    out = np.zeros((2, table.shape[1]), dtype=np.float32)
    ids = {"a": array("i", [5, 7]).tobytes(), "b": array("i", [3]).tobytes()}
    assert _accel.fastmean.mean_rows(table, [["a", "b"], []], ids, out) is True
    assert out[0].tobytes() == table[[5, 7, 3]].mean(axis=0).tobytes() and not out[1].any()
    for texts, known in (([["a", "unknown"]], ids),  # a word it has no ids of
                         ([["a"]], {"a": array("i", [len(table)]).tobytes()}),  # past the table
                         ([["a"]], {"a": array("i", [-1]).tobytes()}),
                         ([["a"]], {"a": b"\x01\x02\x03"}),  # not int32s
                         ([("a",)], ids), ([["a"]], list(ids))):  # not a list, not a dict
        assert _accel.fastmean.mean_rows(table, texts, known, out[:1]) is None
    assert _accel.fastmean.mean_rows(table, [["a"]], ids, out) is None  # rows != texts
    assert _accel.fastmean.mean_rows(table.astype("float64"), [["a"]], ids, out[:1]) is None
    narrow = np.zeros((1, 8), dtype=np.float32)  # contiguous, not the table's width
    assert _accel.fastmean.mean_rows(table, [["a"]], ids, narrow) is None
    assert _accel.fastmean.mean_rows(table, [["a"]], ids, out[:1, :8]) is None  # not contiguous
    assert _accel.fastmean.mean_rows(table, [["a"]], ids, table[:1]) is None  # the table itself
    # a 1-wide table numpy sums pairwise (its reduced axis is contiguous): refused
    thin = np.ascontiguousarray(table[:, :1])
    assert _accel.fastmean.mean_rows(thin, [["a"]], ids, np.zeros((1, 1), np.float32)) is None
    # and the embedder, given what C refuses, still gives the Python loop's vectors
    embedder._word_ids["zz-refused"] = b"\x01\x02\x03"  # a word C refuses
    try:
        with pytest.raises(ValueError):  # numpy refuses it too: the Python loop ran
            embedder.encode(["zz-refused"])
    finally:
        del embedder._word_ids["zz-refused"]


def test_a_negative_zero_sums_as_numpy_sums_it() -> None:
    """numpy's sum starts at +0.0: a -0.0 of the only row comes out +0.0."""
    import numpy as np

    table = np.array([[-0.0, 1.0, -0.0, 2.0], [-0.0, -0.0, 3.0, 0.0]], dtype=np.float32)
    out = np.full((2, 4), 7.0, dtype=np.float32)  # (what was there is overwritten)
    texts = [["a"], ["a", "b"]]
    ids = {"a": array("i", [0]).tobytes(), "b": array("i", [1]).tobytes()}
    assert _accel.fastmean.mean_rows(table, texts, ids, out) is True
    assert out.tobytes() == np.stack([table[[0]].mean(axis=0), table[[0, 1]].mean(axis=0)]).tobytes()
    assert not np.signbit(out[0, 0])


def test_a_key_that_runs_python_code_cannot_crash_it() -> None:
    """A dict lookup may call a key's __eq__ (a hash shared with a non-str key), which may
    empty the lists being read: the call returns None, or True, never crashes."""
    import numpy as np

    table = np.ones((4, 8), dtype=np.float32)
    words = ["a", "a", "a"]
    texts = [words, ["a"]]

    class Evil:
        def __hash__(self) -> int:
            return hash("a")

        def __eq__(self, other: object) -> bool:
            words.clear()
            texts.clear()
            return True

    out = np.zeros((2, 8), dtype=np.float32)
    assert _accel.fastmean.mean_rows(table, texts, {Evil(): b"\0\0\0\0"}, out) in (None, True)
