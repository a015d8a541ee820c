"""How data preparation scales with the corpus: wall time, peak memory and tokenization speed.

Generates corpora of the given sizes from builtin:stdlib (each copy of a module gets its own name and a
first line naming the copy, so documents differ and the validation split by name hash spreads), then
prepares each one in a fresh process with `octlm prepare EXP-001 --json`, as `octlm train` does before its
first step: read the corpus, train the tokenizer, encode into the token file, cut blocks. The child reports
its own peak resident memory (ru_maxrss) and the time of each phase.

    python benchmarks/data_scale.py [--sizes 30,100,300] [--vocab-size 8192] [--folder DIR] [--format parquet]

With ``--format parquet`` the same texts are written as Parquet shards (4,000 documents a shard, 256 a row group,
as the hub publishes corpora) and read from there (issue 48: the Parquet path holds a row group, never a shard).

Targets (issue 15): peak memory flat in the corpus size (largest at most 1.3x the smallest, under 1.5 GB),
time within 1.2x of linear, encoding at least 5 MB/s of text per core.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml


def make_corpus(folder: Path, megabytes: int) -> int:
    """Copies of builtin:stdlib's modules, each with a first line naming its copy, up to ``megabytes``."""
    from octlm.data import corpus

    modules = corpus.builtin_stdlib()
    folder.mkdir(parents=True, exist_ok=True)
    written, copy, target = 0, 0, megabytes * 1_000_000
    while written < target:
        for number, document in enumerate(modules):
            text = f"# copy {copy} of {document.name}\n{document.text}"
            size = len(text.encode("utf-8", "surrogatepass"))
            (folder / f"c{copy:03d}-{number:05d}.txt").write_text(text, encoding="utf-8", errors="surrogatepass")
            written += size
            if written >= target:
                break
        copy += 1
    return written


def to_parquet(folder: Path, shards: Path) -> None:
    """The corpus's files as Parquet shards of a ``text`` column, in the files' order; the files removed."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    files = sorted(folder.glob("*.txt"))
    shards.mkdir(parents=True)
    for start in range(0, len(files), 4000):
        texts = [p.read_text(encoding="utf-8", errors="surrogatepass") for p in files[start : start + 4000]]
        path = shards / f"train-{start // 4000:05d}.parquet"
        pq.write_table(pa.table({"text": pa.array(texts, pa.string())}), path, row_group_size=256)
    shutil.rmtree(folder)


def prepare_in_child(home: Path) -> dict[str, object]:
    """`octlm prepare EXP-001 --json` in a fresh process: the phases, tokens and its peak memory."""
    started = time.perf_counter()
    result = subprocess.run(
        [sys.executable, "-m", "octlm", "--home", str(home), "prepare", "EXP-001", "--json"],
        capture_output=True,
        text=True,
        check=False,
        cwd=home,
    )
    if result.returncode != 0:
        raise SystemExit(f"preparing {home} failed:\n{result.stderr[-2000:]}")
    report = json.loads(result.stdout)
    return {
        "wall_seconds": time.perf_counter() - started,
        "peak_rss_mb": report["peak_rss_mb"],
        "tokens": sum(report["tokens"].values()),
        "phases": {phase["name"]: phase["seconds"] for phase in report["phases"]},
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="30,100,300", help="corpus sizes in MB")
    parser.add_argument("--vocab-size", type=int, default=8192, help="the tokenizer's size (day2's)")
    parser.add_argument("--folder", type=Path, default=None, help="where the corpora go (default: a temporary folder)")
    parser.add_argument("--format", choices=("text", "parquet"), default="text", help="text files or Parquet shards")
    args = parser.parse_args()
    sizes = [int(size) for size in args.sizes.split(",")]
    root = args.folder or Path(tempfile.mkdtemp(prefix="octlm-data-scale-"))
    rows = []
    for megabytes in sizes:
        home = root / f"{megabytes}MB"
        text_bytes = make_corpus(home / "corpus", megabytes)
        if args.format == "parquet":
            to_parquet(home / "corpus", home / "shards")
        config = {
            "id": "EXP-001",
            "preset": "day2",
            "data": {
                "sources": ["shards" if args.format == "parquet" else "corpus/*.txt"],
                "validation_fraction": 0.02,
            },
            "tokenizer": {"vocab_size": args.vocab_size},
            "training": {"compile": False},
        }
        (home / "experiments").mkdir(exist_ok=True)
        (home / "experiments" / "EXP-001.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
        report = prepare_in_child(home)
        rows.append({"megabytes": text_bytes / 1e6, **report})
        print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    cores = os.cpu_count() or 1
    first = rows[0]
    print("| corpus MB | wall s | peak RSS MB | RSS / first | time / linear | tokens | encode MB/s/core | phases s |")
    print("|---|---|---|---|---|---|---|---|")
    for row in rows:
        phases = row["phases"]
        encoding = phases.get("encoding", 0.0)
        per_core = row["megabytes"] / encoding / cores if encoding else float("nan")
        linear = row["wall_seconds"] / (first["wall_seconds"] * row["megabytes"] / first["megabytes"])
        shown = ", ".join(f"{name} {seconds:.1f}" for name, seconds in phases.items())
        print(
            f"| {row['megabytes']:.0f} | {row['wall_seconds']:.1f} | {row['peak_rss_mb']:.0f} | "
            f"{row['peak_rss_mb'] / first['peak_rss_mb']:.2f} | {linear:.2f} | {row['tokens']:,} | {per_core:.1f} | "
            f"{shown} |"
        )
    print(f"corpora in {root}", file=sys.stderr)


if __name__ == "__main__":
    main()
