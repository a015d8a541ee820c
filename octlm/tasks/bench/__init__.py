"""``octlm bench``: what to time, decided before torch loads (``plan``), the step against this
machine's matmul peak (``measure``), the step on several ranks (``ranks``) in rounds that alternate its variants
(``rounds``), and what ``octlm bench --json`` writes (``records``).
"""
