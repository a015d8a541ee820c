"""Whether an evaluation's standard error covers what it claims to: a simulation over documents (issue 46).

Each draw makes a validation split of D documents from a population: a document of n blocks (n geometric, mean
--blocks), each block of 128 target tokens whose loss per token is ``mu + u_d + e_i``, with a document effect ``u_d``
(sd --between) and within a document an AR(1) block noise ``e_i`` (sd --within, correlation --rho), so adjacent
blocks of one document are alike, as real ones are. The split is cut into blocks with octlm's own code
(``data.blocks``: each block's document, the ``spread`` or ``first`` selection of k of them, their clusters), and the
loss and its standard error are octlm's (``train.evaluation.ratio_error`` over the clusters, or over the blocks as
before issue 46). Reported: how often ``loss +/- 2 se`` and the t interval (Student's t at G-1 degrees of freedom)
cover the population's mean ``mu`` (a new draw of documents would move the figure by the document effects too) and
the split's own mean (what another draw of blocks from this split would move), over --draws draws.

python benchmarks/clusters.py [--draws 2000] [--min-documents 4] [--json]

``--min-documents`` tries another rule than octlm's (``data.blocks.MIN_DOCUMENTS``: the fewest documents whose
blocks are clustered by document rather than by chunks of 8).
"""

from __future__ import annotations

import argparse
import json
import math

import numpy as np

from octlm.data import blocks as octlm_blocks
from octlm.data.blocks import TokenBlocks
from octlm.train.evaluation import ratio_error
from octlm.views.compare.student import t_critical

TARGETS, WIDTH = (
    128,
    9,
)  # target tokens a block (in the figures); tokens a block in the stream (only its positions count)
SCENARIOS = (  # (name, documents in the split, blocks evaluated, selection)
    ("60 documents, 64 blocks spread", 60, 64, "spread"),
    ("60 documents, 64 blocks first", 60, 64, "first"),
    ("20 documents, 32 blocks spread", 20, 32, "spread"),
    ("12 documents, 16 blocks spread", 12, 16, "spread"),
    ("4 documents, 16 blocks spread", 4, 16, "spread"),
    ("4 documents, 16 blocks first", 4, 16, "first"),
)


def split(documents: int, args: argparse.Namespace, draw: np.random.Generator) -> tuple[TokenBlocks, np.ndarray]:
    """A validation split of ``documents`` documents (blocks aligned to them), and each block's loss per token."""
    sizes = draw.geometric(1 / args.blocks, size=documents)
    losses = []
    for size in sizes:
        noise = np.empty(size)
        noise[0] = draw.normal(0, args.within)
        for i in range(1, size):
            noise[i] = args.rho * noise[i - 1] + draw.normal(0, args.within * math.sqrt(1 - args.rho**2))
        losses.append(args.mu + draw.normal(0, args.between) + noise)
    stream = draw.integers(1, 300, size=int(sizes.sum()) * WIDTH)  # its tokens seed the spread selection
    blocks = TokenBlocks(stream, WIDTH, np.ones(300, dtype=np.int64), pad_id=0)
    return blocks.with_documents(sizes * WIDTH), np.concatenate(losses)


def one_draw(scenario: tuple, args: argparse.Namespace, draw: np.random.Generator) -> dict[str, float]:
    _, documents, count, selection = scenario
    blocks, losses = split(documents, args, draw)
    chosen = blocks.choose(count, selection)
    assert chosen.rows is not None
    nats, targets = losses[chosen.rows] * TARGETS, np.full(len(chosen), float(TARGETS))
    loss, clusters = nats.sum() / targets.sum(), chosen.cluster_ids()[0]
    g = int(clusters.max()) + 1
    se, over_blocks = ratio_error(nats, targets, clusters), ratio_error(nats, targets)
    t = t_critical(g - 1) if g >= 2 else math.inf
    found = {"clusters": g, "ratio": (se or math.nan) / (over_blocks or math.nan)}
    for name, target in (("population", args.mu), ("split", losses.mean())):
        miss = abs(loss - target)
        found[f"{name} 2se"] = float(se is not None and miss <= 2 * se)
        found[f"{name} t"] = float(se is not None and miss <= t * se)
        found[f"{name} 2se blocks"] = float(over_blocks is not None and miss <= 2 * over_blocks)
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--draws", type=int, default=2000)
    parser.add_argument("--blocks", type=float, default=10.0, help="mean blocks a document")
    parser.add_argument("--mu", type=float, default=5.0)
    parser.add_argument("--between", type=float, default=0.3, help="sd of the document effect")
    parser.add_argument("--within", type=float, default=0.3, help="sd of a block's own noise")
    parser.add_argument("--rho", type=float, default=0.6, help="correlation of adjacent blocks' noise")
    parser.add_argument("--seed", type=int, default=46)
    parser.add_argument("--min-documents", type=int, default=octlm_blocks.MIN_DOCUMENTS)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    octlm_blocks.MIN_DOCUMENTS = args.min_documents
    draw, table = np.random.default_rng(args.seed), {}
    for scenario in SCENARIOS:
        rows = [one_draw(scenario, args, draw) for _ in range(args.draws)]
        table[scenario[0]] = {key: float(np.nanmean([r[key] for r in rows])) for key in rows[0]}
    if args.json:
        print(json.dumps({"draws": args.draws, "options": vars(args), "coverage": table}, indent=1))
        return
    keys = ("clusters", "ratio", "population 2se", "population t", "population 2se blocks", "split 2se", "split t")
    print(f"{args.draws} draws; coverage of the population's mean and of the split's own")
    print(f"{'scenario':34} " + " ".join(f"{k:>21}" for k in keys))
    for name, figures in table.items():
        print(f"{name:34} " + " ".join(f"{figures[k]:21.3f}" for k in keys))


if __name__ == "__main__":
    main()
