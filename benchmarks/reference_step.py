"""octlm's training step against a textbook GPT step of the same shape, timed alternately in one run.

The reference is what a plain eager implementation looks like: `nn.Embedding` tied to the output, pre-norm
blocks of `nn.LayerNorm`, one `nn.Linear` for q, k and v, causal SDPA, an output projection, a GELU MLP of
4d, cross-entropy, `clip_grad_norm_` and foreach AdamW. Same d_model, layers, heads, context, vocabulary and
batch as the preset; its matmul FLOPs per token are within a few percent of octlm's (a GELU MLP of 4d has
8d^2 weights, octlm's SwiGLU of about 8d/3 has 8d^2 too). Rounds alternate: K steps of octlm, K steps of the
reference, so drift in the machine's speed falls on both. Medians of per-step times.

    python benchmarks/reference_step.py [--preset day1] [--rounds 6] [--steps 10] [--compile]

With ``--compile`` octlm's step runs through torch.compile (as ``training.compile: true``) and the reference
stays eager: what a user gets from each, the compile time left out (``benchmarks/first_step.py`` measures it).
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from octlm.core.home import Home
from octlm.runtime import machine as runtime
from octlm.tasks.bench import measure as bench
from octlm.tasks.bench import plan as bench_plan
from octlm.train.loop import train_step
from octlm.train.state import TrainState


class Block(nn.Module):
    def __init__(self, d: int, heads: int):
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.up, self.down = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        attended = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, d)
        x = x + self.proj(attended)
        return x + self.down(F.gelu(self.up(self.norm2(x))))


class TextbookGPT(nn.Module):
    def __init__(self, vocab: int, d: int, layers: int, heads: int, context: int):
        super().__init__()
        self.embed, self.position = nn.Embedding(vocab, d), nn.Embedding(context, d)
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.norm = nn.LayerNorm(d)

    def forward(self, tokens: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens) + self.position(torch.arange(tokens.shape[1], device=tokens.device))
        for block in self.blocks:
            x = block(x)
        logits = self.norm(x) @ self.embed.weight.T  # tied
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.reshape(-1))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--preset", default="day1")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--steps", type=int, default=10, help="steps of each side per round")
    parser.add_argument("--profile", action="store_true", help="then profile 10 octlm steps: the top operators")
    parser.add_argument("--compile", action="store_true", help="octlm's step through torch.compile (warm-up compiles)")
    args = parser.parse_args()
    config = bench_plan.with_choices(bench.resolve_config(Home(Path.cwd()), None, args.preset), args.compile)
    device = runtime.prepare_process(config)
    blocks = bench.synthetic_blocks(config)
    state = TrainState.fresh(config, device, len(blocks))
    m, t = config.model, config.training
    reference = TextbookGPT(config.tokenizer.vocab_size, m.d_model, m.n_layers, m.n_heads, m.context_length).to(device)
    optimizer = torch.optim.AdamW(reference.parameters(), lr=1e-4, betas=(0.9, 0.95), weight_decay=0.1, foreach=True)
    generator = torch.Generator().manual_seed(1)

    def reference_step() -> None:
        index = torch.randint(len(blocks), (t.batch_size,), generator=generator)
        inputs, targets = blocks.batch(index)
        loss = reference(inputs.to(device), targets.to(device))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(reference.parameters(), t.grad_clip)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    def octlm_step() -> None:
        train_step(state, blocks, 1e-4)

    sides = {"octlm": octlm_step, "reference": reference_step}
    times: dict[str, list[float]] = {name: [] for name in sides}
    for step in sides.values():  # warm-up: kernels, allocator, optimizer state
        for _ in range(3):
            step()
    for _ in range(args.rounds):
        for name, step in sides.items():
            for _ in range(args.steps):
                started = time.perf_counter()
                step()
                bench.sync(device)
                times[name].append(time.perf_counter() - started)
    tokens = t.batch_size * m.context_length
    medians = {name: statistics.median(values) for name, values in times.items()}
    counts = {"octlm": state.model.parameter_count(), "reference": sum(p.numel() for p in reference.parameters())}
    for name, seconds in medians.items():
        print(f"{name:9} {seconds * 1000:8.2f} ms/step {tokens / seconds:10,.0f} tokens/s {counts[name]:,} parameters")
    ratio = medians["reference"] / medians["octlm"]
    print(f"octlm / reference tokens/s: {ratio:.3f} ({args.preset}, {device}, octlm compiled: {args.compile})")
    if args.profile:
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as profiler:
            for _ in range(10):
                octlm_step()
        print(profiler.key_averages().table(sort_by="self_cpu_time_total", row_limit=15))


if __name__ == "__main__":
    main()
