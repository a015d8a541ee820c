"""From sources to batches: where documents come from (``sources``), the formats they are read in (``formats/``: one
table of them, with their streaming readers), the documents themselves (``corpus``, with the frozen ``corpora/``),
the tokenizer (``tokenizer``: byte-level BPE trained on the corpus, or a tokenizers file brought along), the token
file (``tokens``), blocks of tokens (``blocks``), the order training reads them in and its receipt (``sampler``), the
fingerprints of what a run trains on and the tokenizer file it brings (``fingerprints``), and the pipeline that
prepares it all for a run (``pipeline``, with ``apart`` for the work done
in a short-lived child).
May import: ``core``, ``config`` (the process is set up by ``run/`` before the data is read).
"""
