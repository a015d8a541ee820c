"""Safe file handling (torch-free): octlm's own files written whole, through no link (``atomic``: created
exclusively under a temporary name, fsynced, renamed over the target); only regular files opened, read or appended
to, within a size cap and, for octlm's own files, never through a final link (``regular``); and every file the user
names for output (``-o FILE``), written by the one writer that knows which links, devices and FIFOs it may write
through (``output``), and every folder the user names for output (``-o DIR``), checked and written whole
(``folder``). Everything is named here too, so ``from octlm.core.fsutil import ...`` reads any of them.
"""

from octlm.core.fsutil.atomic import (
    TEMPORARY_SUFFIX,
    atomic_write,
    atomic_writer,
    create_exclusive,
    create_temporary,
    fsync_dir,
)
from octlm.core.fsutil.folder import check_folder, publish
from octlm.core.fsutil.output import KERNEL_LINKS, Output, check_output, output_writer, write_output
from octlm.core.fsutil.regular import (
    UnsafeFile,
    check_regular,
    file_sha256,
    kind_of,
    open_append,
    open_regular,
    read_regular,
)

__all__ = [
    "KERNEL_LINKS",
    "TEMPORARY_SUFFIX",
    "Output",
    "UnsafeFile",
    "atomic_write",
    "atomic_writer",
    "check_folder",
    "check_output",
    "check_regular",
    "create_exclusive",
    "create_temporary",
    "file_sha256",
    "fsync_dir",
    "kind_of",
    "open_append",
    "open_regular",
    "output_writer",
    "publish",
    "read_regular",
    "write_output",
]
