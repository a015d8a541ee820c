"""From sources to batches: where documents come from (``sources``), the documents themselves (``corpus``, with the
frozen ``corpora/``), the byte-level BPE (``tokenizer``), the token file (``tokens``), blocks of tokens (``blocks``),
the order training reads them in and its receipt (``sampler``), the fingerprints of what a run trains on
(``fingerprints``), and the pipeline that prepares it all for a run (``pipeline``, with ``apart`` for the work done
in a short-lived child).
May import: ``core``, ``config`` (the process is set up by ``run/`` before the data is read).
"""
