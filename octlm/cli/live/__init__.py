"""What is drawn while work runs: the training reporter's phases and bar (``progress``), verify-resume's segments
(``segments``), ``octlm watch``'s screen (``watch``) and the columns they share, fitted to the terminal (``bars``).
"""
