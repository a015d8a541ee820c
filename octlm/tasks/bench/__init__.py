"""``octlm bench``: what to time, decided before torch loads (``plan``), the step against this
machine's matmul peak (``measure``), and the step on several ranks (``ranks``).
"""
