"""The Typer app (torch-free at import): ``app`` registers every command of ``commands/``; ``common``
holds error handling and strict options; ``render`` and ``show_view`` draw tables and text for humans, ``live/`` what
is drawn while work runs (the training bar, verify-resume's segments, ``octlm watch``); ``ranks`` and ``profile``
prepare a command's processes.
May import: everything.
"""
