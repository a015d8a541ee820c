"""``octlm doctor``: the registry checked against the files, and what it lost rebuilt from them. ``checkup``
runs every check (the registry's cells, experiments and rows, runs, claims, sweeps, identities, staging folders)
and says what ``--repair`` fixed; ``files`` checks one experiment's checkpoint files against its rows."""

from octlm.tasks.doctor.checkup import advice, run

__all__ = ["advice", "run"]
