"""The model: the decoder as ``nn.Module``s (``decoder``) and the kernels that run several canonical pieces in one
forward and backward with each piece's own bits (``piecewise``). No I/O, no printing.
May import: ``core``, ``config``, ``runtime``, ``data``.
"""
