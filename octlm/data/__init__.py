"""From sources to batches: documents (``corpus``, with the frozen ``corpora/``), the BPE tokenizer
(``tokenizer``), blocks, the token file and the sampler (``blocks``), the fingerprints of what a run trains on
(``fingerprints``) and the pipeline that prepares it all for a run (``pipeline``, with ``apart`` for work done
in a short-lived child).
May import: ``core``, ``config``, ``runtime``.
"""
