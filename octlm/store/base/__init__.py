"""The registry's plumbing (torch-free), under the named reads and writes of ``store/registry.py``: a row's cells
(``cells``: the columns a write may name, derived from the migrations, the tables an experiment's rows live in, the
JSON cells and their encoding, a non-finite number included) and the connection (``connection``: the registry file
and its side files refused when they are not SQLite's own, opening read-only or for writing, migrating, write
transactions). Together with ``registry.py`` and ``store/sweeps/`` they hold all of octlm's SQL; the schema is in
``store/migrations/``. Everything is named here too, so ``from octlm.store.base import ...`` reads either.
"""

from octlm.store.base.cells import (
    CHECKPOINT_COLUMNS,
    EXPERIMENT_COLUMNS,
    EXPERIMENT_TABLES,
    HOME_TABLES,
    JSON_CELLS,
    JSON_COLUMNS,
    METRIC_COLUMNS,
    METRIC_TABLE_FIELDS,
    METRIC_TRACKS,
    NONFINITE,
    NOTE_COLUMNS,
    RUN_COLUMNS,
    SWEEP_TABLES,
    TRAINING_KINDS,
    VERIFICATION_COLUMNS,
    Fields,
    checked,
    decode,
    decoded,
    encode,
    new_uuid,
    now,
    untag_text,
    writable,
)
from octlm.store.base.connection import BUSY_TIMEOUT_S, KNOWN_MIGRATIONS, SIDE_FILES, RegistryBase

__all__ = [
    "BUSY_TIMEOUT_S",
    "CHECKPOINT_COLUMNS",
    "EXPERIMENT_COLUMNS",
    "EXPERIMENT_TABLES",
    "HOME_TABLES",
    "JSON_CELLS",
    "JSON_COLUMNS",
    "KNOWN_MIGRATIONS",
    "METRIC_COLUMNS",
    "METRIC_TABLE_FIELDS",
    "METRIC_TRACKS",
    "NONFINITE",
    "NOTE_COLUMNS",
    "RUN_COLUMNS",
    "SIDE_FILES",
    "SWEEP_TABLES",
    "TRAINING_KINDS",
    "VERIFICATION_COLUMNS",
    "Fields",
    "RegistryBase",
    "checked",
    "decode",
    "decoded",
    "encode",
    "new_uuid",
    "now",
    "untag_text",
    "writable",
]
