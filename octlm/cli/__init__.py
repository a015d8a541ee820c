"""The Typer app (torch-free at import): ``app`` registers every command of ``commands/``; ``common``
holds error handling and strict options; ``render``, ``show_view``, ``progress``, ``segments`` and ``live`` (the
Live screen of ``octlm watch``) draw for humans; ``ranks`` and ``profile`` prepare a command's processes.
May import: everything.
"""
