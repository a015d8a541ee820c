"""Building blocks for builtin:stdlib: octlm's table lookup against the seed's per-token loop.

Both paths start from the same token stream and must produce the same byte lengths; the
seed's loop runs on a prefix (it is too slow for the whole corpus) and is scaled per token.

    python benchmarks/blocks.py [--max-bytes N] [--seed-tokens N]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch

from octlm.data import blocks as data
from octlm.data import corpus
from octlm.data.tokenizer import Tokenizer


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--max-bytes", type=int, default=0, help="cap on the stdlib corpus (0 = all of it)")
    parser.add_argument("--seed-tokens", type=int, default=300_000, help="tokens the seed-style loop processes")
    parser.add_argument("--vocab-size", type=int, default=4096)
    args = parser.parse_args()

    started = time.perf_counter()
    found = corpus.load(("builtin:stdlib",), Path.cwd(), 0.02, args.max_bytes)
    size = sum(len(d.text.encode()) for d in found.train)
    print(
        f"corpus: {len(found.train)} training documents, {size / 1e6:.1f} MB "
        f"({time.perf_counter() - started:.1f} s to read)"
    )
    started = time.perf_counter()
    tokenizer = Tokenizer.train([d.text for d in found.train], args.vocab_size)
    print(f"tokenizer: {tokenizer.vocab_size} tokens trained in {time.perf_counter() - started:.1f} s")
    started = time.perf_counter()
    stream = tokenizer.encode_documents([d.text for d in found.train])
    print(f"encode (batched, Rust): {len(stream):,} tokens in {time.perf_counter() - started:.1f} s")

    started = time.perf_counter()
    blocks = data.make_blocks(stream, tokenizer, 256)
    ours = time.perf_counter() - started
    tokens = blocks.targets.numel()

    prefix = blocks.targets[: max(1, args.seed_tokens // 256)]
    started = time.perf_counter()
    reference = torch.tensor([[tokenizer.token_bytes(int(token)) for token in row] for row in prefix])
    seed = time.perf_counter() - started
    assert torch.equal(reference, blocks.byte_lengths[: len(prefix)]), "byte lengths disagree"
    seed_per_token = seed / prefix.numel()
    print(f"octlm make_blocks: {tokens:,} target tokens in {ours:.3f} s ({tokens / ours / 1e6:.1f} M tokens/s)")
    print(f"seed per-token loop: {prefix.numel():,} tokens in {seed:.3f} s ({1 / seed_per_token / 1e6:.2f} M tokens/s)")
    print(
        f"speed-up: {seed_per_token * tokens / ours:.0f}x (seed loop extrapolated to the whole corpus: "
        f"{seed_per_token * tokens:.1f} s)"
    )


if __name__ == "__main__":
    main()
