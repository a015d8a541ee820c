"""The data formats ``data.sources`` reads (docs/modules.md, "Families"): one ``Format`` row each in one table,
``FORMATS`` (``table``): how a file of it is recognized (its name's ending; the text row, the first, by its content:
any file that decodes as UTF-8), the reader that streams its documents and reads each again where it lies, the
packages it needs (the data extra, imported only when a source of that format is named), its help sentence, from
which the documentation of ``data.sources`` comes (``table.sources_doc``), and how a file of it is made from texts
(``Format.write``: the family's test and the guide's examples use it). tests/data/test_formats.py trains on every row.

The readers stream: text and JSON Lines, plain or compressed (``records``), Parquet a row group and Arrow a record
batch at a time (``columns``), on the files as opened, checked, capped and decompressed (``files``), so that a corpus
costs memory for its documents' names and one row group, whatever its size. Everything is named here too, so
``from octlm.data.formats import ...`` reads any of them.
May import: ``core``.
"""

from octlm.data.formats.files import EXTRA, Budget, DataFile
from octlm.data.formats.table import DEFAULT_FIELD, FORMATS, Format, missing, recognized, sources_doc

__all__ = ["DEFAULT_FIELD", "EXTRA", "FORMATS", "Budget", "DataFile", "Format", "missing", "recognized", "sources_doc"]
