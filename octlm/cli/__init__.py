"""The Typer app (torch-free at import): ``app`` registers every command of ``commands/`` and holds the classes
they are made of (strict options, help in panels, one-line usage errors); ``common`` holds what every command module
shares (error handling, the option aliases, the home); ``render`` draws tables and text for humans and JSON for
scripts, each value written as its column's kind says (``formats``), and ``show_view`` draws what ``octlm show``
says; ``live/`` is what is drawn while work runs (the training bar, verify-resume's segments, ``octlm watch``);
``ranks`` and ``profile`` prepare a command's processes; ``reference`` regenerates ``docs/reference/`` from the code.
May import: everything.
"""
