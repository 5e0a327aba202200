"""The optional embedder: bundled weights, offline, deterministic; a clear error without it."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from caveman_batch import embedding
from caveman_batch.embedding import EMBED_EXTRA_HINT, extra_installed, load_embedder
from caveman_batch.errors import EmbedderUnavailable, UsageError

needs_extra = pytest.mark.skipif(not extra_installed(),
                                 reason=f"embed extra not installed: {EMBED_EXTRA_HINT}")

TEXTS = ["check if the API is healthy", "health check: report service liveness",
         "delete a file from disk", "Créer un fichier — 日本語のテキスト", ""]


def test_missing_extra_is_none_unless_required(monkeypatch: pytest.MonkeyPatch) -> None:
    # a module set to None in sys.modules is one find_spec reports as not installed
    monkeypatch.setitem(sys.modules, "tokenizers", None)
    assert not extra_installed()
    assert load_embedder() is None
    with pytest.raises(EmbedderUnavailable, match=r"pip install '\.\[embed\]'") as caught:
        load_embedder(required=True)
    assert isinstance(caught.value, UsageError) and caught.value.exit_code == 1


def test_missing_model_package_names_the_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(embedding, "_MODEL_DIST", "no-such-distribution-caveman")
    assert not extra_installed()
    with pytest.raises(EmbedderUnavailable, match="no-such-distribution-caveman.*embed"):
        load_embedder(required=True)


@needs_extra
def test_vectors_are_unit_float32_and_deterministic() -> None:
    first = load_embedder(required=True)
    vectors = first.encode(TEXTS)
    assert vectors.shape == (len(TEXTS), first.dim) and vectors.dtype.name == "float32"
    norms = (vectors.astype("float64") ** 2).sum(axis=1) ** 0.5
    assert norms[:-1] == pytest.approx([1.0] * (len(TEXTS) - 1), abs=1e-5)
    assert norms[-1] == 0.0  # an empty text has no tokens: a zero row, not NaN
    # the same bytes from a fresh instance, and whatever a text is encoded with
    again = load_embedder(required=True)
    assert again.name == first.name
    assert again.encode(TEXTS).tobytes() == vectors.tobytes()
    alone = [again.encode([text])[0].tobytes() for text in TEXTS]
    assert alone == [row.tobytes() for row in vectors]
    assert again.encode(list(reversed(TEXTS)))[::-1].tobytes() == vectors.tobytes()
    # a word cache that overflows and starts again changes nothing
    small = load_embedder(required=True)
    small._MAX_CACHED_WORDS = 3  # type: ignore[attr-defined]
    assert [small.encode([t])[0].tobytes() for t in TEXTS] == alone


@needs_extra
def test_similar_texts_are_nearer() -> None:
    vectors = load_embedder(required=True).encode(TEXTS[:3])
    assert vectors[0] @ vectors[1] > vectors[0] @ vectors[2] + 0.1


@needs_extra
def test_name_carries_the_weights_digest() -> None:
    name = load_embedder(required=True).name
    model, _, rest = name.partition("@")
    digest, _, method = rest.partition("/")
    assert model == "wordllama/l2_supercat_256" and method == "mean-words-v1"
    assert len(digest) == 16 and int(digest, 16) >= 0


@needs_extra
def test_loads_and_encodes_with_no_network() -> None:
    """A fresh interpreter with every socket connect refused and no proxy or hub settings."""
    script = textwrap.dedent("""
        import socket
        attempts = []
        def refuse(self, address, *args, **kwargs):
            attempts.append(address)
            raise OSError("network disabled by the test")
        socket.socket.connect = refuse
        socket.socket.connect_ex = refuse
        socket.create_connection = lambda address, *a, **k: refuse(None, address)
        from caveman_batch.embedding import load_embedder
        vectors = load_embedder(required=True).encode(["check if the API is healthy"])
        assert vectors.shape == (1, 256), vectors.shape
        assert not attempts, attempts
        print("ok", attempts)
    """)
    env = {key: value for key, value in os.environ.items()
           if "proxy" not in key.lower() and not key.startswith(("HF_", "HUGGINGFACE"))}
    env.update(HF_HUB_OFFLINE="1", HOME=os.environ.get("HOME", "/nonexistent"))
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok []"


def test_cli_embed_without_the_extra_is_a_user_error(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    from caveman_batch.cli import main
    from caveman_batch.toolsearch import ToolIndex

    ToolIndex.open(tmp_path / "i.db").close()
    monkeypatch.setitem(sys.modules, "tokenizers", None)
    assert main(["search", "anything", "--index", str(tmp_path / "i.db"), "--embed"]) == 1
    assert "pip install '.[embed]'" in capsys.readouterr().err
    # without --embed the same search is BM25 alone, and fine
    assert main(["search", "anything", "--index", str(tmp_path / "i.db")]) == 0
