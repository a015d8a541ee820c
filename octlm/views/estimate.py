"""How long a run will take, from earlier runs on this machine: one line said before a long run.

The rate is a run file's last ``elapsed_seconds`` over its step (the experiment's own, else that of an
experiment the registry holds with the same config fingerprint); the checkpoint size is its newest checkpoint file's.
Torch-free; any file that cannot be read simply gives no estimate.
"""

from __future__ import annotations

from octlm.config import Config
from octlm.core import layout
from octlm.core.home import Home
from octlm.core.reporting import counted
from octlm.store.registry import Registry
from octlm.store.runs import runfile

LONG_RUN_S = 60.0  # shorter runs get no estimate: their bar says enough


def _rate(home: Home, experiment_id: str) -> float | None:
    """Seconds per step of the experiment's run file so far, or None."""
    try:
        records = runfile.read(home.run_file(experiment_id))
    except Exception:
        return None
    timed = [r for r in records if isinstance(r, dict) and r.get("elapsed_seconds") and r.get("step")]
    if not timed:
        return None
    last = timed[-1]
    return float(last["elapsed_seconds"]) / int(last["step"])


def _checkpoint_bytes(home: Home, experiment_id: str) -> int | None:
    folder = home.checkpoint_dir(experiment_id)
    try:
        files = [path for _, path in layout.checkpoints(folder) if path.is_file()]
    except OSError:
        return None
    return files[-1].stat().st_size if files else None


def _siblings(home: Home, config: Config) -> list[str]:
    """The experiment first, then every other one the registry holds with the same config fingerprint (no YAML is
    parsed: a start never reads every experiment of the home)."""
    with Registry(home.registry, create=False) as registry:
        same = registry.with_fingerprint(config.fingerprint)
    return [config.id, *(experiment_id for experiment_id in same if experiment_id != config.id)]


def duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h".replace(".0 h", " h")


def expected(home: Home, config: Config, start: int, until: int, minimum: float = LONG_RUN_S) -> str | None:
    """ "10,000 steps at about 1.8 s/step: about 5 h; 146 MB per checkpoint, keeping 3", or None: from the run
    files of ``config``'s experiment and of every other with the same fingerprint."""
    try:
        names = _siblings(home, config)
    except Exception:
        return None
    rate = next((r for r in (_rate(home, name) for name in names) if r), None)
    steps = until - start
    if rate is None or steps <= 0 or rate * steps < minimum:
        return None
    line = f"{counted(steps, 'step')} at about {rate:.3g} s/step: about {duration(rate * steps)}"
    size = next((s for s in (_checkpoint_bytes(home, name) for name in names) if s), None)
    if size:
        megabytes = f"{size / 1e6:,.0f}" if size >= 10e6 else f"{size / 1e6:.2g}"
        line += f"; {megabytes} MB per checkpoint, keeping {config.checkpoint.keep}"
    return line
