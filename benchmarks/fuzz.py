"""The long fuzz campaign of issue 51: every reader of ``tests/fuzz/`` (config files and ``--set``, the registry,
packs, export records, run files and blocks files, checkpoints, the token file and cache, data sources) fed generated
inputs by the thousand, in this process (each case a fresh copy of a valid home, its command called through Typer's
runner), with the same properties as the suite's budget (``tests/fuzz/fuzzing.check``). Failures are recorded, not
raised, so that every case of the budget runs; the table says per reader: cases run, minutes, cases per second,
distinct failures (by ``fuzzing.signature``), and the smallest failing case of each (the shortest as printed).

    python benchmarks/fuzz.py --cases 100000 [--seed 0] [--readers config,packs] [--jobs 2] [--minutes 90]
                              [--chunk 500] [--progress fuzz.log] [--json out.json]

``--cases`` is the total, shared evenly among the readers chosen (``--per-reader`` sets each instead). The cases run
in chunks of ``--chunk`` (each a Hypothesis run of its own, seeded from ``--seed``, the reader and the chunk's
number, so that Hypothesis's record of the cases it made stays small and a chunk's cases are the same every run),
taken round-robin: every reader's first chunk, then every reader's second, so that a campaign stopped early (or
bounded by ``--minutes``, the whole campaign's time) has given every reader its share of what ran. ``--jobs``
processes take the chunks in that order, each making the valid home once. One thread for torch, as the suite's
workers; the box's load at the start and the end is printed beside the table, and ``--json`` is written again as
each chunk ends (a campaign stopped early still says what it ran); each process writes a line every 100 cases to
``--progress``.
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

STUCK = 180  # seconds a case may take, all limits past, before its process is ended (fuzzing.LIMIT is 20)
READERS = ("config", "registry", "packs", "records", "runfiles", "checkpoints", "tokens", "sources")


_VALID: dict[str, Any] = {}  # the valid home of this process (each process of --jobs makes its own, once)


def valid_home() -> dict[str, Any]:
    """This process's valid home, made at its first chunk, in memory where the box has /dev/shm."""
    import fuzzing as fz

    if not _VALID:
        shm = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None
        scratch = tempfile.mkdtemp(prefix="octlm-fuzz-", dir=shm)
        atexit.register(shutil.rmtree, scratch, True)
        _VALID.update(fz.build_valid(Path(scratch) / "valid"), scratch=scratch)
    return _VALID


def chunk(name: str, number: int, cases: int, seed: int, deadline: float, progress: str | None) -> dict[str, Any]:
    """Run up to ``cases`` generated cases of one reader (its chunk ``number``), none started after ``deadline``
    (``time.time()``); what they found."""
    import fuzzing as fz
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import seed as seeded
    from hypothesis import strategies as st

    result: dict[str, Any] = {"reader": name, "cases": 0, "seconds": 0.0, "failures": {}}
    if time.time() > deadline:
        return result  # the campaign's time is spent: the chunks left end at once
    valid = valid_home()
    reader: fz.Reader = importlib.import_module(f"test_fuzz_{name}").READER
    strategy = reader.cases(valid)
    started = time.perf_counter()
    out = open(progress, "a") if progress else sys.stderr  # noqa: SIM115

    @seeded(seed * 1_000_003 + READERS.index(name) * 10_007 + number)
    @settings(
        max_examples=cases,
        database=None,
        deadline=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(data=st.data())
    def one(data: st.DataObject) -> None:
        mutations, args = data.draw(strategy)  # drawn even when not run: Hypothesis refuses a test that draws less
        if result["cases"] >= cases or time.time() > deadline:
            return  # the campaign's time is spent: the cases left are not run (nor counted)
        # A case stuck past every limit (in C code that retries its call past the alarm: SQLite opening a FIFO) says
        # where it is and ends its process: the chunk counts as a failure, and the campaign goes on in a new one.
        faulthandler.dump_traceback_later(STUCK, file=out, exit=True)
        try:
            failures = fz.check(reader, valid, mutations, args)
        except Exception as error:  # the harness's own failure: counted and shown, the campaign goes on
            failures = [f"harness: {type(error).__name__}: {error}"]
        record(result, mutations, args, failures)
        result["seconds"] = time.perf_counter() - started
        if result["cases"] % 100 == 0:
            print(f"{time.strftime('%H:%M:%S')} {name} chunk {number}: {result['cases']} cases, "
                  f"{result['cases'] / result['seconds']:.1f}/s, {len(result['failures'])} distinct failures",
                  file=out, flush=True)  # fmt: skip

    one()
    faulthandler.cancel_dump_traceback_later()
    result["seconds"] = time.perf_counter() - started
    return result


def record(result: dict[str, Any], mutations: Any, args: Any, failures: list[str]) -> None:
    """One case counted, and each of its failures under its signature, the smallest case of each kept."""
    import fuzzing as fz

    result["cases"] += 1
    for failure in failures:
        example = f"{list(mutations)!r} `octlm {' '.join(args)}`"
        add(result["failures"], fz.signature(failure), {"count": 1, "example": example, "failure": failure})


def add(failures: dict[str, Any], key: str, entry: dict[str, Any]) -> None:
    """``entry`` (a count, its smallest example) merged into ``failures`` under ``key``."""
    kept = failures.setdefault(key, {**entry, "count": 0})
    kept["count"] += entry["count"]
    if len(entry["example"]) < len(kept["example"]):
        kept.update(example=entry["example"], failure=entry["failure"])


def merged(totals: dict[str, dict[str, Any]], result: dict[str, Any]) -> None:
    total = totals[result["reader"]]
    total["cases"] += result["cases"]
    total["seconds"] += result["seconds"]
    total["chunks"] += 1
    total["rate"] = total["cases"] / total["seconds"] if total["seconds"] else 0.0
    for key, entry in result["failures"].items():
        add(total["failures"], key, entry)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=8000, help="cases in all, shared among the readers")
    parser.add_argument("--per-reader", type=int, default=None, help="cases for each reader (instead of --cases)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--readers", default=",".join(READERS))
    parser.add_argument("--jobs", type=int, default=1, help="processes taking the chunks")
    parser.add_argument("--chunk", type=int, default=500, help="cases of one reader in one Hypothesis run")
    parser.add_argument("--minutes", type=float, default=None, help="the campaign's time: no case starts after it")
    parser.add_argument("--progress", default=None, help="a file for a line every 100 cases (default: stderr)")
    parser.add_argument("--json", default=None, help="also write the results to this file, as each chunk ends")
    options = parser.parse_args()
    names = [name for name in options.readers.split(",") if name]
    each = options.per_reader or max(1, options.cases // len(names))
    load_before, started = os.getloadavg(), time.time()
    deadline = started + options.minutes * 60 if options.minutes else float("inf")
    rounds = -(-each // options.chunk)
    order = [(name, number, min(options.chunk, each - number * options.chunk)) for number in range(rounds)
             for name in names]  # fmt: skip
    totals = {name: {"reader": name, "cases": 0, "seconds": 0.0, "rate": 0.0, "chunks": 0, "failures": {}}
              for name in names}  # fmt: skip

    def done(result: dict[str, Any]) -> None:
        merged(totals, result)
        if options.json:
            write_json(options.json, totals, load_before, started, options.seed, final=False)

    run_chunks(order, options, deadline, done)
    write_json(options.json, totals, load_before, started, options.seed, final=True)
    report(list(totals.values()), load_before, os.getloadavg(), time.time() - started, options.seed)


def run_chunks(order: list[tuple[str, int, int]], options: argparse.Namespace, deadline: float, done: Any) -> None:
    """Each chunk of ``order`` run (in ``--jobs`` processes, in that order), ``done`` told each result. A process
    that dies (a crash no ``except`` catches, or a case stuck ``STUCK`` seconds) is a failure of its chunk, and the
    campaign goes on in new ones."""
    given = (options.seed, deadline, options.progress)
    if options.jobs <= 1:
        for name, number, cases in order:
            done(chunk(name, number, cases, *given))
        return
    left = list(order)
    while left:
        context = multiprocessing.get_context("spawn")
        with concurrent.futures.ProcessPoolExecutor(options.jobs, mp_context=context) as pool:
            futures = {pool.submit(chunk, *item[:3], *given): item for item in left}
            for future in concurrent.futures.as_completed(futures):
                item = futures[future]
                try:
                    result = future.result()
                except Exception as error:  # a process died (BrokenProcessPool), or the chunk's harness failed
                    failure = (
                        f"process died: {error}" if _broken(error) else f"harness: {type(error).__name__}: {error}"
                    )
                    entry = {"count": 1, "example": f"chunk {item[1]} of {item[0]}", "failure": failure}
                    result = {"reader": item[0], "cases": 0, "seconds": 0.0, "failures": {failure[:80]: entry}}
                left.remove(item)
                done(result)
                if _broken(future.exception()):
                    break  # the pool is broken: the chunks left run in a new one
            pool.shutdown(cancel_futures=True)


def _broken(error: BaseException | None) -> bool:
    return isinstance(error, concurrent.futures.process.BrokenProcessPool)


def write_json(
    path: str | None, totals: dict[str, Any], load: tuple[float, ...], started: float, seed: int, final: bool
):
    if not path:
        return
    document = {
        "seed": seed,
        "started": time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(started)),
        "minutes": (time.time() - started) / 60,
        "load_at_start": load[0],
        "load_now": os.getloadavg()[0],
        "finished": final,
        "readers": list(totals.values()),
    }
    Path(f"{path}.part").write_text(json.dumps(document, indent=1))
    os.replace(f"{path}.part", path)


def report(results: list[dict[str, Any]], before: tuple[float, ...], after: tuple[float, ...], took: float, seed: int):
    total = sum(result["cases"] for result in results)
    print(f"seed {seed}; {total:,} cases in {took / 60:.1f} min; load average {before[0]:.1f} at the start, "
          f"{after[0]:.1f} at the end")  # fmt: skip
    print(f"{'reader':<12} {'cases':>8} {'minutes':>8} {'cases/s':>8} {'distinct failures':>18}")
    for result in results:
        print(f"{result['reader']:<12} {result['cases']:>8,} {result['seconds'] / 60:>8.1f} {result['rate']:>8.1f} "
              f"{len(result['failures']):>18}")  # fmt: skip
    for result in results:
        for key, entry in sorted(result["failures"].items()):
            print(f"\n{result['reader']}: {key} ({entry['count']} cases)\n  smallest: {entry['example'][:1500]}\n"
                  f"  {entry['failure'][:400]}")  # fmt: skip


if __name__ == "__main__":
    main()
