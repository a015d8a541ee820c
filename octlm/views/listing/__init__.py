"""The experiment list of ``octlm show`` (torch-free): its columns in one spec, each once, in the one order the
table, ``--json`` and ``--csv`` read (``columns``: key, header, type, how the table writes it, when a narrow terminal
leaves it out; a figure is a field of the run's newest record, so one more is one line there and no migration), its
rows, read from the registry with each experiment's newest record whole, and the seed replicates among them
(``rows``), and what ``--where``, ``--sort``, ``--limit`` and ``--columns`` make of them (``filters``: Python
predicates, never SQL). Everything is named here too, so ``from octlm.views import listing`` reads each.
"""

from octlm.views.listing import columns
from octlm.views.listing.columns import COLUMNS, Column
from octlm.views.listing.filters import header, parse_columns, parse_where, predicate
from octlm.views.listing.rows import Listing, replicate_groups, rows, select, verdict_cells

ListingRow = columns.row_shape()  # an experiment of ``show --json``, made from the spec (the JSON reference's)

__all__ = [
    "COLUMNS",
    "Column",
    "Listing",
    "ListingRow",
    "columns",
    "header",
    "parse_columns",
    "parse_where",
    "predicate",
    "replicate_groups",
    "rows",
    "select",
    "verdict_cells",
]
