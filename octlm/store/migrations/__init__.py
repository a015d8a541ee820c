"""The registry's schema, in one place (torch-free): named, append-only migrations, applied with sqlite-utils, and
the columns each table has once they ran (``steps``: the migration set, ``TABLE_COLUMNS``, ``ADDED``), and the rows
a read returns (``rows``: ``ExperimentRow`` ... ``MetricRow``, TypedDicts that name those columns; a test holds
them together). Everything is named here too, so ``from octlm.store.migrations import ...`` reads either.

Never edit or reorder a migration that has shipped: add a new one at the end of its list.
"""

from octlm.store.migrations.rows import (
    CheckpointRow,
    ExperimentRow,
    Json,
    MetricRow,
    NoteRow,
    RunRow,
    SummaryRow,
    VerificationRow,
)
from octlm.store.migrations.steps import ADDED, NAMES, SET_NAME, STEPS, TABLE_COLUMNS, migration_set

__all__ = [
    "ADDED",
    "NAMES",
    "SET_NAME",
    "STEPS",
    "TABLE_COLUMNS",
    "CheckpointRow",
    "ExperimentRow",
    "Json",
    "MetricRow",
    "NoteRow",
    "RunRow",
    "SummaryRow",
    "VerificationRow",
    "migration_set",
]
