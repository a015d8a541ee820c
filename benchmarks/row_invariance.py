"""Issue 37 item 1, its first question: are the step's kernels row-invariant under each determinism tier?

Canonical pieces could run all of a rank's pieces in one pass only if a row's result does not depend on how many
rows share the call (a rank of 2 holds half the pieces of one process, and both must compute the same bits for
each piece). For each tier, in a process of its own (the tier pinned before torch loads, as octlm pins it), this
compares the first piece's result computed alone with the same piece computed among 2 and 4 pieces:

- ``matmul``: a linear layer's forward, [P x rows, in] @ [in, out] (the row-wise products of the step);
- ``matmul^T``: the input gradient, [P x rows, out] @ [out, in];
- ``bmm``: the per-piece weight gradients as one batched product, [P, in, rows] @ [P, rows, out];
- ``sdpa``: causal attention over [P x sequences, heads, T, head dim], and its backward;
- ``rmsnorm``, ``silu``, ``cross-entropy`` (and its backward): elementwise and row-wise.

python benchmarks/row_invariance.py [--tiers local,vendor,cross-vendor,portable] [--threads 1]
Prints one line per tier and kernel: ``same`` or ``DIFFERS`` at 2 and 4 pieces, at day1's and day2's shapes.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

SHAPES = {"day1": (256, 128, 4, 128), "day2": (512, 384, 6, 256)}  # rows per piece, width, heads, context


def _kernels(rows: int, width: int, heads: int, context: int) -> dict:
    import torch
    import torch.nn.functional as F

    def cases(pieces: int, seed: int = 0) -> dict:
        generator = torch.Generator().manual_seed(seed)

        def draw(*shape: int) -> torch.Tensor:
            return torch.randn(*shape, generator=generator)

        x, weight, grad = draw(4 * rows, width), draw(width, 4 * width), draw(4 * rows, 4 * width)
        q = draw(4 * rows // context, heads, context, width // heads)
        logits, targets = draw(4 * rows, 1024), torch.randint(0, 1024, (4 * rows,), generator=generator)
        n, s = pieces * rows, pieces * rows // context
        per_piece = grad[:n].reshape(pieces, rows, -1)
        attended = q[:s].clone().requires_grad_()
        F.scaled_dot_product_attention(attended, attended, attended, is_causal=True).backward(q[:s])
        scored = logits[:n].clone().requires_grad_()
        F.cross_entropy(scored, targets[:n], reduction="sum").backward()
        return {
            "matmul": (x[:n] @ weight)[:rows],
            "matmul^T": (grad[:n] @ weight.T)[:rows],
            "bmm": torch.bmm(x[:n].reshape(pieces, rows, width).transpose(1, 2), per_piece)[0],
            "sdpa": F.scaled_dot_product_attention(q[:s], q[:s], q[:s], is_causal=True)[: rows // context],
            "sdpa backward": attended.grad[: rows // context],
            "rmsnorm": F.rms_norm(x[:n], (width,))[:rows],
            "silu": F.silu(grad[:n])[:rows],
            "cross-entropy": F.cross_entropy(logits[:n], targets[:n], reduction="none")[:rows],
            "cross-entropy backward": scored.grad[:rows],
        }

    alone = cases(1)
    found = {}
    for pieces in (2, 4):
        among = cases(pieces)
        for name, value in alone.items():
            found.setdefault(name, []).append(bool(torch.equal(value, among[name])))
    return found


def child(tier: str, threads: int) -> None:
    """In a process of its own: pin ``tier`` as octlm does, then measure."""
    from octlm.config import Config
    from octlm.runtime import determinism

    determinism.pin(
        Config().with_keys({"training.determinism": tier, "training.micro_batches": 2}, "--tier")
    )  # as pieces pin it
    import torch

    torch.set_num_threads(threads)
    print(json.dumps({name: _kernels(*shape) for name, shape in SHAPES.items()}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tiers", default="local,vendor,cross-vendor,portable")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(args.child, args.threads)
    print(f"row invariance at {args.threads} thread(s): the first piece alone against among 2 and 4 pieces")
    for tier in args.tiers.split(","):
        env = {k: v for k, v in os.environ.items() if not k.startswith(("MKL_", "ATEN_", "ONEDNN_", "LD_PRELOAD"))}
        command = [sys.executable, __file__, "--child", tier, "--threads", str(args.threads)]
        done = subprocess.run(command, capture_output=True, text=True, env=env, check=True)
        for shape, kernels in json.loads(done.stdout.strip().splitlines()[-1]).items():
            said = ", ".join(f"{k} {'same' if all(v) else 'DIFFERS ' + str(v)}" for k, v in kernels.items())
            print(f"{tier:13} {shape}: {said}")
    return None


if __name__ == "__main__":
    main()
