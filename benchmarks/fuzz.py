"""The long fuzz campaign of issue 51: every reader of ``tests/fuzz/`` (config files and ``--set``, the registry,
packs, export records, run files and blocks files, checkpoints, the token file and cache, data sources) fed generated
inputs by the thousand, in this process (each case a fresh copy of a valid home, its command called through Typer's
runner), with the same properties as the suite's budget (``tests/fuzz/fuzzing.check``). Failures are recorded, not
raised, so that every case of the budget runs; the table says per reader: cases run, cases per second, distinct
failures (by ``fuzzing.signature``), and the smallest failing case of each (the shortest as printed).

    python benchmarks/fuzz.py --cases 100000 [--seed 0] [--readers config,packs] [--progress fuzz.log] [--json out.json]

``--cases`` is the total, shared evenly among the readers chosen (``--per-reader`` sets each instead). One thread
for torch, as the suite's workers; the box's load at the start and the end is printed beside the table.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OCTLM_NO_LOAD_CHECK", "1")
REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "tests" / "fuzz"), str(REPO / "tests")]

READERS = ("config", "registry", "packs", "records", "runfiles", "checkpoints", "tokens", "sources")


def campaign(name: str, valid: dict[str, Any], cases: int, seed: int, progress: Any) -> dict[str, Any]:
    """Run ``cases`` generated cases of one reader; what it found."""
    import fuzzing as fz
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import seed as seeded
    from hypothesis import strategies as st

    module = importlib.import_module(f"test_fuzz_{name}")
    reader: fz.Reader = module.READER
    strategy = reader.cases(valid)
    found: dict[str, dict[str, Any]] = {}
    ran, started = [0], time.perf_counter()

    @seeded(seed)
    @settings(
        max_examples=cases,
        database=None,
        deadline=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
        derandomize=False,
    )
    @given(data=st.data())
    def one(data: st.DataObject) -> None:
        mutations, args = data.draw(strategy)
        try:
            failures = fz.check(reader, valid, mutations, args)
        except Exception as error:  # the harness's own failure: counted and shown, the campaign goes on
            failures = [f"harness: {type(error).__name__}: {error}"]
        ran[0] += 1
        for failure in failures:
            key = fz.signature(failure)
            example = f"{list(mutations)!r} `octlm {' '.join(args)}`"
            entry = found.setdefault(key, {"count": 0, "example": example, "failure": failure})
            entry["count"] += 1
            if len(example) < len(entry["example"]):
                entry.update(example=example, failure=failure)
        if ran[0] % 100 == 0 and progress is not None:
            rate = ran[0] / (time.perf_counter() - started)
            print(f"{time.strftime('%H:%M:%S')} {name}: {ran[0]} cases, {rate:.1f}/s, {len(found)} distinct failures",
                  file=progress, flush=True)  # fmt: skip

    one()
    seconds = time.perf_counter() - started
    return {"reader": name, "cases": ran[0], "seconds": seconds, "rate": ran[0] / seconds, "failures": found}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=8000, help="cases in all, shared among the readers")
    parser.add_argument("--per-reader", type=int, default=None, help="cases for each reader (instead of --cases)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--readers", default=",".join(READERS))
    parser.add_argument("--progress", default=None, help="a file for a line every 100 cases (default: stderr)")
    parser.add_argument("--json", default=None, help="also write the results to this file")
    parser.add_argument("--scratch", default=None, help="where the cases' homes go (default: /dev/shm, else /tmp)")
    options = parser.parse_args()
    names = [name for name in options.readers.split(",") if name]
    each = options.per_reader or max(1, options.cases // len(names))
    progress = open(options.progress, "a") if options.progress else sys.stderr  # noqa: SIM115

    import fuzzing as fz

    load_before, started = os.getloadavg(), time.time()
    shm = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None  # memory, not the disk: a case is many small files
    with tempfile.TemporaryDirectory(prefix="octlm-fuzz-", dir=options.scratch or shm) as scratch:
        valid = {**fz.build_valid(Path(scratch) / "valid"), "scratch": scratch}
        results = []
        for name in names:
            results.append(campaign(name, valid, each, options.seed, progress))
            if options.json:
                Path(options.json).write_text(json.dumps(results, indent=1))
    report(results, load_before, os.getloadavg(), time.time() - started, options.seed)


def report(results: list[dict[str, Any]], before: tuple[float, ...], after: tuple[float, ...], took: float, seed: int):
    total = sum(result["cases"] for result in results)
    print(f"seed {seed}; {total:,} cases in {took / 60:.1f} min; load average {before[0]:.1f} at the start, "
          f"{after[0]:.1f} at the end")  # fmt: skip
    print(f"{'reader':<12} {'cases':>8} {'cases/s':>8} {'distinct failures':>18}")
    for result in results:
        print(f"{result['reader']:<12} {result['cases']:>8,} {result['rate']:>8.1f} {len(result['failures']):>18}")
    for result in results:
        for key, entry in sorted(result["failures"].items()):
            print(f"\n{result['reader']}: {key} ({entry['count']} cases)\n  smallest: {entry['example']}\n"
                  f"  {entry['failure'][:400]}")  # fmt: skip


if __name__ == "__main__":
    main()
