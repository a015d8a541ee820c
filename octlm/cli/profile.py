"""The determinism profile of a command's process, pinned before the command imports torch (``determinism``).

Every command that trains (or times, or runs the canary) calls ``pin_experiment`` with its experiment ID first:
the experiment's ``training.determinism`` sets the environment torch reads when it loads, and the processes
the command starts (``verify-resume``'s segments, the ranks of ``--nproc``) inherit it. A rank on a box without
the home has no config to read: it inherits the profile from its launcher's environment, or refuses in
``runtime.require_profile`` when it does not hold it (export the variables ``octlm canary`` names there).
"""

from __future__ import annotations

import typer

from octlm.cli.common import home_of
from octlm.config import Config
from octlm.runtime import determinism
from octlm.store import experiments


def pin_experiment(ctx: typer.Context, experiment_id: str) -> Config | None:
    """Load the config of ``experiment_id`` when it is here and pin its profile; the config, which the command
    passes on (it is loaded once), or None on a box without it (a rank there is told what to train)."""
    home = home_of(ctx)
    if not home.config_path(experiment_id).is_file():
        return None
    config = experiments.load(home, experiment_id)
    determinism.pin(config)
    return config
