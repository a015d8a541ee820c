"""``octlm report`` without a browser and without training: escaping, refusals, determinism, the page's
parts, and the points of each chart against the run file. Run files and registry rows are written here
directly (torch is never imported), so these tests take a second or two."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import jinja2
import pytest
from conftest import cli

from octlm.core.home import Home
from octlm.store import experiments
from octlm.store.registry import Registry
from octlm.views import report as reports

EVIL = '<script>alert(1)</script> "><img src=x onerror=alert(2)>'


VERIFY = {
    "verdict": "pass",
    "split_at": [8],
    "until": 16,
    "nproc": 1,
    "next_loss": 5.0675,
    "seconds": {"a": 3.5, "b": 9.9},
    "checks": [{"check": "model", "compared": 20, "differing": []}, {"check": "rng", "compared": 3, "differing": []}],
    "summary": "identical: model 20/20, rng 3/3",
}
OVERFIT = {
    "steps": 20,
    "max_loss": 1.0,
    "final_loss": 3.7659,
    "perplexity": 43.204,
    "bits_per_byte": 4.5752,
    "first_logged": {"step": 4, "train_loss": 5.4656},
    "matched_tokens": 6,
    "block_tokens": 17,
    "block_text": EVIL,
    "decoded_text": "Documen",
}


def records(steps: int, scale: float = 1.0) -> list[dict]:
    """A run file's records: the training loss every 2 steps, an evaluation every 4."""
    found = []
    for step in range(2, steps + 1, 2):
        record = {
            "step": step,
            "tokens": step * 64,
            "lr": 1e-3 * (1 - step / (2 * steps)),
            "train_loss": scale * (6 - step / 10),
            "gradient_norm": 1.5 - step / 40,
        }
        if step % 4 == 0:
            record |= {
                "eval_loss": scale * (6.1 - step / 10),
                "perplexity": 300.0 - step,
                "bits_per_byte": 3 - step / 50,
            }
        found.append(record)
    return found


def fill(home: Path, experiment_id: str, found: list[dict], argv: list[str] | None = None) -> None:
    """What a training run leaves: its run file, a finished run row, a checkpoint row."""
    (home / "runs").mkdir(exist_ok=True)
    (home / "runs" / f"{experiment_id}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in found))
    where = Home.locate(home)
    with Registry(where.registry) as registry:
        if registry.experiment(experiment_id) is None:  # a YAML written by the fixture, not yet registered
            experiments.register(where, registry, experiments.load(where, experiment_id))
        run = registry.start_run(experiment_id, "train", start_step=0, argv=argv or ["octlm", "train", experiment_id])
        registry.finish_run(run, "completed", end_step=found[-1]["step"], latest_metrics=found[-1])
        path = f"checkpoints/{experiment_id}/step-000012.pt"
        registry.add_checkpoint(
            experiment_id=experiment_id, run_id=run, step=found[-1]["step"], path=path, sha256="ab" * 32, size=1234
        )


@pytest.fixture
def filled(home: Path) -> Path:
    """EXP-001 (12 steps) and EXP-002 (a variant, 16 steps) with run files and rows; EXP-002's description,
    notes and argv carry markup."""
    assert (
        cli(home, "new", "EXP-002", "--from", "EXP-001", "--set", "training.steps=16", "--description", EVIL).exit_code
        == 0
    )
    assert cli(home, "note", "EXP-002", EVIL).exit_code == 0
    fill(home, "EXP-001", records(12))
    fill(home, "EXP-002", records(16, 0.9), argv=["octlm", "train", EVIL])
    with Registry(Home.locate(home).registry) as registry:
        registry.add_verification("EXP-002", "verify-resume", "pass", VERIFY)
        registry.add_verification("EXP-002", "overfit", "fail", OVERFIT)
    return home


def report(home: Path, *args: str):
    return cli(home, "report", *args)


def test_every_value_is_escaped(filled: Path) -> None:
    for ids in (["EXP-002"], ["EXP-001", "EXP-002"]):
        html = report(filled, *ids).stdout
        assert "<script" not in html.lower() and "<img" not in html.lower()
        # autoescape (MarkupSafe) writes a double quote as &#34; and a single one as &#39;
        assert "&lt;script&gt;alert(1)&lt;/script&gt; &#34;&gt;&lt;img src=x onerror=alert(2)&gt;" in html
    single = report(filled, "EXP-002").stdout
    assert single.count("&lt;img src=x") >= 5  # description (title, lede, config), note, argv, overfit block


def test_verdicts(filled: Path) -> None:
    html = report(filled, "EXP-002").stdout
    assert '<h3>verify-resume: <span class="pass">PASS</span>' in html and "<td>rng</td>" in html
    assert "<td>training loss early (the first log)</td><td>5.5891 (step 20)</td><td>5.4656 (step 4)</td>" in html
    assert "<td>greedy decode reproduces</td><td>the block&#39;s opening</td><td>6 of 17 tokens</td>" in html
    assert "<pre>Documen</pre>" in html
    assert "1 process a segment;" in html and "20 steps on one block;" in html  # issue 45 item 9: no process(es)


def test_unknown_id_exits_2_and_writes_nothing(filled: Path, tmp_path: Path) -> None:
    out = tmp_path / "r.html"
    result = report(filled, "EXP-001", "EXP-404", "-o", str(out))
    assert result.exit_code == 2 and not out.exists()
    assert result.stderr.count("\n") == 1 and "EXP-404" in result.stderr and result.stdout == ""
    result = report(filled, "EXP-001", "EXP-001")
    assert result.exit_code == 2 and "more than once" in result.stderr


def test_unwritable_output_is_one_line(filled: Path, tmp_path: Path) -> None:
    result = report(filled, "EXP-001", "-o", str(tmp_path / "missing" / "r.html"))
    assert result.exit_code == 3 and result.stderr.count("\n") == 1 and "cannot write the report" in result.stderr
    result = report(filled, "EXP-001", "-o", str(tmp_path))  # a folder
    assert result.exit_code in (2, 3) and result.stderr.count("\n") == 1
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []


def test_the_page_is_self_contained_and_deterministic(filled: Path, tmp_path: Path) -> None:
    first, second = tmp_path / "a.html", tmp_path / "b.html"
    assert report(filled, "EXP-001", "EXP-002", "-o", str(first)).exit_code == 0
    assert report(filled, "EXP-001", "EXP-002", "-o", str(second)).exit_code == 0
    html = first.read_text()
    assert first.read_bytes() == second.read_bytes() == report(filled, "EXP-001", "EXP-002").stdout.encode()
    assert html.startswith("<!DOCTYPE html>") and len(first.read_bytes()) < 100_000
    for forbidden in ("<script", "http", "src=", "url(", "@import", "<link", "<iframe", "javascript:"):
        assert forbidden not in html.replace("src=x", ""), forbidden
    for part in ("Side by side", "Config keys that differ", "training.steps", "Loss by tokens", "Gradient norm"):
        assert part in html


def test_each_chart_has_a_point_per_record(filled: Path) -> None:
    html = report(filled, "EXP-001").stdout
    found = records(12)
    charts = re.findall(
        r'<svg class="chart" data-chart="([^"]+)" data-metrics="([^"]+)" data-x="(\w+)"(.*?)</svg>', html, re.S
    )
    assert [c[0] for c in charts] == ["loss-step", "loss-tokens", "lr", "gradient-norm", "bpb"]
    for _, metrics, _, body in charts:
        expected = sum(1 for r in found for m in metrics.split() if r.get(m) is not None)
        assert body.count("<circle") == expected
        assert body.count("<title>") >= expected
    assert "clip threshold 1" in html  # the gradient norm's clip line, from training.grad_clip
    assert "eval loss at step 12, 768 tokens = 4.9<" in html  # a point's hover text (its <title>)


def test_an_experiment_never_trained_has_a_page(home: Path) -> None:
    result = report(home, "EXP-001")
    assert result.exit_code == 0 and "No run file yet" in result.stdout and "No verdicts yet" in result.stdout


def test_every_template_is_used_and_escapes(filled: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The pages of one experiment, of several, of one never trained and of a sweep load every file under
    templates/; the environment escapes in every template and refuses a missing variable; no template marks a
    value safe."""
    loaded: set[str] = set()

    class Recording(jinja2.FileSystemLoader):
        def get_source(self, environment: jinja2.Environment, template: str) -> tuple[str, str, object]:
            loaded.add(template)
            return super().get_source(environment, template)

    env = reports.environment(Recording(reports.TEMPLATES))
    monkeypatch.setattr(reports, "templates", lambda: env)
    assert cli(filled, "new", "EXP-003", "--from", "EXP-001").exit_code == 0  # never trained
    assert cli(filled, "sweep", "new", "seeds", "--from", "EXP-001", "--seeds", "2").exit_code == 0
    for ids in (["EXP-002"], ["EXP-001", "EXP-002"], ["EXP-003"], ["seeds"]):
        assert report(filled, *ids).exit_code == 0
    files = sorted(path.name for path in reports.TEMPLATES.iterdir())
    assert sorted(loaded) == files == sorted(env.list_templates())
    for environment in (env, reports.environment()):  # as `octlm report` builds it
        assert environment.autoescape is True and environment.undefined is jinja2.StrictUndefined
    for name in files:
        assert not re.search(r"\|\s*safe\b|autoescape\s+false", (reports.TEMPLATES / name).read_text()), name


def test_report_is_torch_free_at_import() -> None:
    code = "import sys, octlm.cli.app, octlm.views.report; assert 'torch' not in sys.modules, 'torch loaded'"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_a_sweeps_page_draws_its_metric_against_each_key_with_error_bars(home: Path) -> None:
    """``octlm report SWEEP``: one point per configuration with an error bar over its seeds and a dot per replicate,
    the best so far, the ranking; the values written here as a worker records them (no training)."""
    made = cli(
        home,
        "sweep",
        "new",
        "lr",
        "--from",
        "EXP-001",
        "--grid",
        "training.learning_rate=1e-3,4e-3",
        "--seeds",
        "2",
        "--json",
    )
    trials = json.loads(made.stdout)["trials"]
    with Registry(home / "registry.db") as registry:
        sweep = registry.sweep("lr")
        assert sweep is not None
        for n, trial in enumerate(trials):
            claim = registry.claim([sweep["id"]], {"host": "box", "pid": 1, "threads": 1, "device": "cpu"})
            assert claim is not None and claim["experiment_id"] == trial["id"]
            registry.settle_claim(claim["claim_id"], "done", value=5.0 - (n // 2) / 10 + (n % 2) / 100)
    result = report(home, "lr")
    assert result.exit_code == 0, result.stderr
    page = result.stdout
    chart = page[page.index('data-chart="against-training.learning_rate"') :].split("</svg>")[0]
    assert chart.count('class="error"') == 2 and chart.count('class="replicate"') == 4
    assert "5.005 ± 0.0071 (2 seeds)" in chart.replace("5.0050", "5.005")
    assert 'data-chart="best-so-far"' in page and page.count("<polyline") == 1
    ranking = page[page.index("Configurations, best first") :]
    assert ranking.index("0.004") < ranking.index("0.001")  # the lower loss first
    # issue 46: the winner's notes under the verdict: the luckiest trial, those within noise of it, the advice
    notes = page[page.index('<ul class="notes">') : page.index("<h2>Curves</h2>")]
    assert "the luckiest single trial" in notes and "within noise of the best" in notes
    assert "expected optimism" in notes and "sweep extend lr --seeds 5" in notes
