"""The name octlm had before its package became ``octlm``: ``python -m octlm_cli ...`` still runs the command line.

Nothing else lives here; import ``octlm`` (``octlm.load``, ``octlm.runs``) instead.
"""
