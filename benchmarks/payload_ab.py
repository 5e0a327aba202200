"""A/B timing of `payload.reduce` across revisions, on the payload benchmark's corpus.

    python benchmarks/payload_ab.py write CORPUS_DIR
    python benchmarks/payload_ab.py compare CORPUS_DIR CHECKOUT... [--rounds N]

`write` makes the corpus of benchmarks/test_bench_payload.py once (the real outputs made on
the spot, each scaled to ~1 MB, plus the written ones) and writes it to a folder, with the
unscaled outputs beside it, so every revision reads the same bytes. `compare` times each
checkout (a `git worktree add /tmp/pay-REV REV` with its C accelerators built in place:
`python setup.py build_ext --inplace -q`) in a subprocess of its own with PYTHONPATH at that
checkout: every output is reduced once untimed (imports, compiled patterns), then once timed
in process CPU time, at the 2,000-char budget, after a garbage collection (no output pays
for the garbage of those before it). Rounds alternate between the checkouts; each output's
median over the rounds is summed per checkout, and the table per output shows where the
time goes. The first checkout is the reference of the ratios.

`digest CORPUS_DIR` prints one sha256 over every view (scaled outputs at 2,000 chars, unscaled
at 2,000 and at the default budget) of the checkout on PYTHONPATH: two checkouts that print
the same make the same views on this corpus.
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BUDGET = 2_000
_MANIFEST = "manifest.json"


def write(folder: Path) -> None:
    """The benchmark's corpus as files, and a manifest naming each one's tool hint."""
    sys.path.insert(0, str(Path(__file__).parent))
    from test_bench_payload import _scaled  # the benchmark's own scaling

    from caveman_batch.testing import payload_outputs as po

    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        real, _ = po.corpus(Path(tmp))
    outputs = real + [po.api_json(), po.service_log(), po.tsc_output(), po.gcc_output(), po.eslint_output(),
                      po.ruff_output(), po.cargo_output()]
    entries = []
    for k, out in enumerate(outputs):
        name = f"{k:02d}-{out.name}"
        (folder / f"{name}.scaled").write_bytes(_scaled(out, 1_000_000))
        (folder / f"{name}.raw").write_bytes(out.data)
        entries.append({"name": name, "tool": out.tool})
    (folder / _MANIFEST).write_text(json.dumps(entries, indent=1) + "\n")


def _entries(folder: Path) -> list[dict[str, str | None]]:
    return json.loads((folder / _MANIFEST).read_text())  # type: ignore[no-any-return]


def time_all(folder: Path) -> dict[str, float]:
    """{output: CPU seconds of one reduce at BUDGET}, after one untimed reduce of each."""
    from caveman_batch.payload import Budget, Hint, reduce

    corpus = [(e["name"], (folder / f"{e['name']}.scaled").read_bytes(), Hint(tool=e["tool"]))
              for e in _entries(folder)]
    for _, data, hint in corpus:
        reduce(data, hint, Budget(BUDGET))
    spent = {}
    for name, data, hint in corpus:
        gc.collect()  # no output pays for the garbage of the ones before it
        start = time.process_time()
        reduce(data, hint, Budget(BUDGET))
        spent[name] = time.process_time() - start
    return spent


def digest(folder: Path) -> str:
    from caveman_batch.payload import Budget, Hint, reduce

    total = hashlib.sha256()
    for e in _entries(folder):
        hint = Hint(tool=e["tool"])
        for suffix, budget in ((".scaled", Budget(BUDGET)), (".raw", Budget(BUDGET)), (".raw", Budget())):
            view = reduce((folder / f"{e['name']}{suffix}").read_bytes(), hint, budget).content
            total.update(hashlib.sha256(view.encode("utf-8", "surrogatepass")).digest())
    return total.hexdigest()


def _child(checkout: Path, folder: Path, what: str) -> str:
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    env.pop("CAVEMAN_PURE_PYTHON", None)
    done = subprocess.run([sys.executable, __file__, what, str(folder)], env=env, cwd=checkout,
                          capture_output=True, text=True, check=True)
    return done.stdout


def compare(folder: Path, checkouts: list[Path], rounds: int) -> None:
    runs: dict[Path, list[dict[str, float]]] = {c: [] for c in checkouts}
    for r in range(rounds):
        order = checkouts if r % 2 == 0 else checkouts[::-1]  # alternate who goes first
        for checkout in order:
            runs[checkout].append(json.loads(_child(checkout, folder, "_time")))
    names = [e["name"] for e in _entries(folder)]
    medians = {c: {n: statistics.median(run[n] for run in runs[c]) for n in names} for c in checkouts}
    ref = medians[checkouts[0]]
    labels = [c.name for c in checkouts]
    print(f"{'output':34}" + "".join(f"{label:>16}" for label in labels) + "   ms, median CPU; ratio vs first")
    for n in sorted(names, key=lambda n: -medians[checkouts[-1]][n]):
        cells = "".join(f"{medians[c][n] * 1e3:9.1f} {medians[c][n] / max(ref[n], 1e-9):5.2f}x" for c in checkouts)
        print(f"{n[:34]:34}{cells}")
    nbytes = sum((folder / f"{n}.scaled").stat().st_size for n in names)
    for c in checkouts:
        total = sum(medians[c].values())
        print(f"{c.name}: {total:.3f} s CPU, {total / sum(ref.values()):.3f}x, {nbytes / total / 1e6:.1f} MB/s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("what", choices=("write", "compare", "digest", "_time"))
    parser.add_argument("folder", type=Path)
    parser.add_argument("checkouts", type=Path, nargs="*")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    if args.what == "write":
        write(args.folder)
    elif args.what == "_time":
        print(json.dumps(time_all(args.folder)))
    elif args.what == "digest":
        print(digest(args.folder))
    else:
        compare(args.folder, [c.resolve() for c in args.checkouts], args.rounds)


if __name__ == "__main__":
    main()
