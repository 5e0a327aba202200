"""Dense text embeddings for tool search: an optional extra (`pip install '.[embed]'`).

The model is WordLlama's `l2_supercat_256` (MIT): a static table of 256-dimensional token
vectors distilled from LLM input embeddings, shipped inside the `wordllama` wheel (16 MB of
safetensors plus its tokenizer). A text's vector is the mean of its tokens' vectors, scaled
to unit length: no PyTorch, no network, the same text always gives the same bytes.

We read the two files ourselves (safetensors + tokenizers + numpy) instead of calling
`wordllama.WordLlama.load`: that loader looks for the bundled tokenizer in a folder the wheel
does not have and falls back to a Hugging Face download, and importing `wordllama` calls
`logging.basicConfig` on the root logger. The files are found through the installed
distribution's metadata, which imports nothing.

`Embedder.name` goes into the index beside the vectors: it names the model and the sha256 of
its weights as the wheel records them, so vectors made by another model (or another release
of this one) are recomputed instead of compared with vectors they do not share a space with.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import re
from array import array
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Final, Protocol

from . import _accel
from .errors import EmbedderUnavailable

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt
    from tokenizers import Tokenizer

__all__ = [
    "EMBED_EXTRA_HINT",
    "EmbedderUnavailable",
    "Embedder",
    "WordLlamaEmbedder",
    "extra_installed",
    "choose_embedder",
    "load_embedder",
]

EMBED_EXTRA_HINT = "pip install 'caveman-batch[embed]' (from a checkout: pip install '.[embed]')"

# The modules the default embedder imports, and the distribution whose wheel holds its files.
_REQUIRED_MODULES = ("numpy", "safetensors", "tokenizers")
_MODEL_DIST = "wordllama"
_WEIGHTS = "wordllama/weights/l2_supercat_256.safetensors"
_TOKENIZER = "wordllama/tokenizers/l2_supercat_tokenizer_config.json"
_TENSOR_KEY = "embedding.weight"


class Embedder(Protocol):
    """Turns texts into unit-length float32 vectors, the same bytes for the same text."""

    @property
    def name(self) -> str:
        """Model id and weights digest: vectors are comparable only under the same name."""
        ...

    @property
    def dim(self) -> int: ...

    def encode(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        """One row per text, L2-normalised (an empty text gives a zero row)."""
        ...


def extra_installed() -> bool:
    """True when the embed extra's modules and model files are installed (imports nothing)."""
    return _missing() is None


def load_embedder(*, required: bool = False) -> Embedder | None:
    """The default embedder, or None when the extra is missing and it was not `required`."""
    missing = _missing()
    if missing is not None:
        if required:
            raise EmbedderUnavailable(f"dense embeddings need the embed extra: {missing}")
        return None
    return WordLlamaEmbedder()


def choose_embedder(embed: bool | None) -> Embedder | None:
    """The CLI's --embed / --no-embed / neither: required, none, or whatever is installed."""
    if embed is False:
        return None
    return load_embedder(required=embed is True)


def _missing() -> str | None:
    """Why the default embedder cannot load, or None if it can."""
    for module in _REQUIRED_MODULES:
        if importlib.util.find_spec(module) is None:
            return f"module {module!r} is not installed: {EMBED_EXTRA_HINT}"
    try:
        _model_files()
    except EmbedderUnavailable as exc:
        return str(exc)
    return None


_LONE_SURROGATE: Final = re.compile("[\ud800-\udfff]")  # (in a str, every surrogate is lone)


class WordLlamaEmbedder:
    """WordLlama l2_supercat (256 dims): mean of static token vectors, unit length.

    A text is split on whitespace and each distinct word tokenized once (as "▁word", what
    the tokenizer makes of it mid-sentence), its token ids kept in a bounded cache: tool
    texts repeat their words (8,026 tools of the corpora: 356,101 words, 47,086 distinct),
    and tokenizing whole texts was most of the cost (this way: about 30% less time in all).
    Token for token this is the tokenizer's own split, but for runs of spaces and line
    breaks, which carry no meaning here.

    The weights and tokenizer load on the first `encode`, not at construction, so an index
    that only reads stored vectors and embeds nothing pays for neither.
    """

    # in the name: how vectors are made from the table; a change of method is a new name
    _METHOD = "mean-words-v1"
    _MAX_CACHED_WORDS = 200_000

    def __init__(self) -> None:
        self._weights_path, self._tokenizer_path, digest = _model_files()
        self._name = f"wordllama/l2_supercat_256@{digest[:16]}/{self._METHOD}"
        self._table: npt.NDArray[np.float32] | None = None
        self._tokenizer: Tokenizer | None = None
        self._word_ids: dict[str, bytes] = {}  # word -> its token ids, int32

    @property
    def name(self) -> str:
        return self._name

    @property
    def dim(self) -> int:
        return 256

    def encode(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        import numpy as np

        table, _ = self._loaded()
        split = [text.split() for text in texts]
        self._learn(set().union(*split))
        out = np.empty((len(texts), table.shape[1]), dtype=np.float32)
        # this loop, in C (every row written): the bench registry's 32,547 texts embedded in
        # 2.1 s instead of 3.3 s (see _fastmean.c)
        fast = _accel.fastmean
        if fast is None or fast.mean_rows(table, split, self._word_ids, out) is None:
            out[:] = 0.0
            for row, words in enumerate(split):
                ids = np.frombuffer(b"".join(map(self._word_ids.__getitem__, words)),
                                    dtype=np.intc)
                if ids.size:
                    out[row] = table[ids].mean(axis=0)
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        np.divide(out, norms, out=out, where=norms > 0)
        return out

    def _learn(self, words: set[str]) -> None:
        """Token ids of the words not cached yet, in one tokenizer call."""
        new = sorted(words.difference(self._word_ids))
        if not new:
            return
        if len(self._word_ids) + len(new) > self._MAX_CACHED_WORDS:
            self._word_ids.clear()  # ids are a function of the word: dropping them is safe
            new = sorted(words)
        _, tokenizer = self._loaded()
        # encode_batch_fast (tokenizers >= 0.20) skips the offsets we do not read
        encode = getattr(tokenizer, "encode_batch_fast", tokenizer.encode_batch)
        # a lone surrogate (a query, or a description a server cut mid-emoji, "\ud83d")
        # is no text to the tokenizer, which refuses the whole batch: it reads U+FFFD there
        tokenized = [_LONE_SURROGATE.sub("\ufffd", word) for word in new]
        for word, encoding in zip(new, encode(tokenized, add_special_tokens=False)):
            self._word_ids[word] = array("i", encoding.ids).tobytes()  # joined per text

    def _loaded(self) -> tuple[npt.NDArray[np.float32], Tokenizer]:
        if self._table is None or self._tokenizer is None:  # both made at once
            import numpy as np
            from safetensors.numpy import load_file
            from tokenizers import Tokenizer

            tensors = load_file(str(self._weights_path))
            self._table = np.ascontiguousarray(tensors[_TENSOR_KEY], dtype=np.float32)
            tokenizer = Tokenizer.from_file(str(self._tokenizer_path))
            tokenizer.no_padding()
            tokenizer.no_truncation()
            self._tokenizer = tokenizer
        return self._table, self._tokenizer


def _model_files() -> tuple[Path, Path, str]:
    """(weights, tokenizer, sha256 of the weights as the wheel's RECORD states it)."""
    try:
        dist = importlib.metadata.distribution(_MODEL_DIST)
    except importlib.metadata.PackageNotFoundError:
        raise EmbedderUnavailable(
            f"the embedding model's package {_MODEL_DIST!r} is not installed: {EMBED_EXTRA_HINT}"
        ) from None
    weights = Path(str(dist.locate_file(_WEIGHTS)))
    tokenizer = Path(str(dist.locate_file(_TOKENIZER)))
    for path in (weights, tokenizer):
        if not path.is_file():
            raise EmbedderUnavailable(
                f"{_MODEL_DIST} {dist.version} does not ship {path.name} where expected ({path}): "
                f"reinstall it with {EMBED_EXTRA_HINT}"
            )
    return weights, tokenizer, _recorded_digest(dist, _WEIGHTS) or f"v{dist.version}"


def _recorded_digest(dist: importlib.metadata.Distribution, relpath: str) -> str | None:
    # RECORD holds "sha256=<urlsafe b64>" per file; hex keeps the name readable in the index.
    import base64

    for file in dist.files or ():
        if file.as_posix() == relpath and file.hash is not None and file.hash.mode == "sha256":
            padded = file.hash.value + "=" * (-len(file.hash.value) % 4)
            return base64.urlsafe_b64decode(padded).hex()
    return None
