"""Whether two runs' eval losses may be compared at all (torch-free). A loss is nats per token of a tokenizer on a
validation split: two runs with different tokenizers count other tokens (a loss per token of one is not a loss per
token of the other), and two runs on different data read other validation text, unless their final evaluations read
the very same blocks (the digest of the blocks' tokens, ``views.paired``). What each run trained on is in the
fingerprints the registry keeps beside each run (``data_hash``: the corpus's splits and the tokenizer;
``tokenizer_hash``), as ``show ID`` shows them. Runs that may not be compared get "not comparable", never a verdict
on noise, and the commands that would compare them: both evaluated on one corpus with ``octlm eval ID --on SOURCE``
(the other's sources), read in bits per byte where the tokenizers differ (a figure per byte of text, whatever the
tokenizer)."""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence


def reason(
    first: str,
    other: str,
    prints: tuple[Mapping[str, str | None], Mapping[str, str | None]],
    same_blocks: bool,
    sources: Sequence[str],
) -> str | None:
    """Why ``other`` may not be compared with ``first`` (their fingerprints ``prints``: ``data`` and ``tokenizer``
    each), with the commands that would compare them on ``sources`` (the other's), or None where they may."""
    (data_a, tokenizer_a), (data_b, tokenizer_b) = ((p.get("data"), p.get("tokenizer")) for p in prints)
    on = " ".join(f"--on {shlex.quote(source)}" for source in sources) or "--on SOURCE"
    both = f"`octlm eval {first} {on}` and `octlm eval {other} {on}`"
    if tokenizer_a and tokenizer_b and tokenizer_a != tokenizer_b:
        return (
            f"not comparable: {other} and {first} have different tokenizers (tokenizer {tokenizer_b[:12]} against "
            f"{tokenizer_a[:12]}), and a loss per token of one is not a loss per token of the other: compare their "
            f"bits per byte on one corpus, {both}"
        )
    if data_a and data_b and data_a != data_b and not same_blocks:
        return (
            f"not comparable: {other} and {first} trained on different data (data {data_b[:12]} against "
            f"{data_a[:12]}) and were evaluated on other validation text: compare them on one corpus, {both}"
        )
    return None
