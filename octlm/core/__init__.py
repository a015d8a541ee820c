"""The base every layer stands on (torch-free, imports nothing else of octlm): domain errors and exit codes
(``errors``), safe file handling (``fsutil/``), where a home is and the paths inside it (``home``), how a
checkpoint's files are named (``layout``), the mount table (``mounts``), whether the process behind a run row still
runs (``liveness``), the records that cross layers (``records/``), the signals a run stops for (``signals``), where
a run came from (``provenance``) and how work reports to the user (``reporting``: the reporter, and
``reporting.counted``, the one way a count is said with its noun).
May import: nothing of octlm.
"""
