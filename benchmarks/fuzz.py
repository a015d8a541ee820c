"""The long fuzz campaign of issue 51: every reader of ``tests/fuzz/`` (config files and ``--set``, the registry,
packs, export records, run files and blocks files, checkpoints, the token file and cache, data sources) fed generated
inputs by the thousand, in this process (each case a fresh copy of a valid home, its command called through Typer's
runner), with the same properties as the suite's budget (``tests/fuzz/fuzzing.check``). Failures are recorded, not
raised, so that every case of the budget runs; the table says per reader: cases run, cases per second, distinct
failures (by ``fuzzing.signature``), and the smallest failing case of each (the shortest as printed).

    python benchmarks/fuzz.py --cases 100000 [--seed 0] [--readers config,packs] [--jobs 2] [--minutes 90]
                              [--progress fuzz.log] [--json out.json]

``--cases`` is the total, shared evenly among the readers chosen (``--per-reader`` sets each instead); ``--jobs``
runs that many readers at once, each in a process of its own; ``--minutes`` bounds each reader's share of the time
(the cases left when it is spent are not run, and the table counts only those that ran). One thread for torch, as
the suite's workers; the box's load at the start and the end is printed beside the table, and ``--json`` is written
again every 100 cases (a campaign stopped early still says what it ran).
"""

from __future__ import annotations

import argparse
import atexit
import concurrent.futures
import faulthandler
import importlib
import json
import multiprocessing
import os
import shutil
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


_VALID: dict[str, Any] = {}  # the valid home of this process (a worker of --jobs builds its own)


def campaign(name: str, cases: int, seed: int, seconds: float, progress: str | None, partial: str | None):
    """Run up to ``cases`` generated cases of one reader within ``seconds``; what it found."""
    import fuzzing as fz
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import seed as seeded
    from hypothesis import strategies as st

    if not _VALID:
        shm = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None
        scratch = tempfile.mkdtemp(prefix="octlm-fuzz-", dir=shm)
        atexit.register(shutil.rmtree, scratch, True)  # this process's, a worker of --jobs too
        _VALID.update(fz.build_valid(Path(scratch) / "valid"), scratch=scratch)
    valid = _VALID
    module = importlib.import_module(f"test_fuzz_{name}")
    reader: fz.Reader = module.READER
    strategy = reader.cases(valid)
    result: dict[str, Any] = {"reader": name, "cases": 0, "seconds": 0.0, "rate": 0.0, "failures": {}}
    started = time.perf_counter()
    out = open(progress, "a") if progress else sys.stderr  # noqa: SIM115

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
        if time.perf_counter() - started > seconds:
            return  # the reader's time is spent: the cases left are not run (nor counted)
        faulthandler.dump_traceback_later(300, file=out)  # a case stuck past every limit says where it is
        mutations, args = data.draw(strategy)
        try:
            failures = fz.check(reader, valid, mutations, args)
        except Exception as error:  # the harness's own failure: counted and shown, the campaign goes on
            failures = [f"harness: {type(error).__name__}: {error}"]
        record(result, mutations, args, failures, started)
        if result["cases"] % 100 == 0:
            print(f"{time.strftime('%H:%M:%S')} {name}: {result['cases']} cases, {result['rate']:.1f}/s, "
                  f"{len(result['failures'])} distinct failures", file=out, flush=True)  # fmt: skip
            if partial:
                Path(f"{partial}.{name}").write_text(json.dumps(result, indent=1))

    one()
    faulthandler.cancel_dump_traceback_later()
    if partial:
        Path(f"{partial}.{name}").write_text(json.dumps(result, indent=1))
    return result


def record(result: dict[str, Any], mutations: Any, args: Any, failures: list[str], started: float) -> None:
    """One case counted, and each of its failures under its signature, the smallest case of each kept."""
    import fuzzing as fz

    result["cases"] += 1
    result["seconds"] = time.perf_counter() - started
    result["rate"] = result["cases"] / result["seconds"]
    for failure in failures:
        example = f"{list(mutations)!r} `octlm {' '.join(args)}`"
        entry = result["failures"].setdefault(
            fz.signature(failure), {"count": 0, "example": example, "failure": failure}
        )
        entry["count"] += 1
        if len(example) < len(entry["example"]):
            entry.update(example=example, failure=failure)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=8000, help="cases in all, shared among the readers")
    parser.add_argument("--per-reader", type=int, default=None, help="cases for each reader (instead of --cases)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--readers", default=",".join(READERS))
    parser.add_argument("--jobs", type=int, default=1, help="readers run at once, each in a process of its own")
    parser.add_argument("--minutes", type=float, default=None, help="the campaign's time, shared among the readers")
    parser.add_argument("--progress", default=None, help="a file for a line every 100 cases (default: stderr)")
    parser.add_argument("--json", default=None, help="also write the results to this file")
    options = parser.parse_args()
    names = [name for name in options.readers.split(",") if name]
    each = options.per_reader or max(1, options.cases // len(names))
    rounds = -(-len(names) // max(1, options.jobs))
    seconds = options.minutes * 60 / rounds if options.minutes else float("inf")
    load_before, started = os.getloadavg(), time.time()
    arguments = [(name, each, options.seed, seconds, options.progress, options.json) for name in names]
    if options.jobs > 1:
        context = multiprocessing.get_context("spawn")
        with concurrent.futures.ProcessPoolExecutor(options.jobs, mp_context=context) as pool:
            results = list(pool.map(campaign, *zip(*arguments, strict=True)))
    else:
        results = [campaign(*given) for given in arguments]
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
