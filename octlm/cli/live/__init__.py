"""What is drawn while work runs: the training reporter's phases and bar (``progress``; plain timestamped lines off a
terminal), verify-resume's segments (``segments``), ``octlm watch``'s screen (``watch``), ``work --ray``'s
live view of its trials on their nodes (``on_ray``: watch's screen) and the columns they share, fitted to the terminal
(``bars``); the standard streams nobody reads any more, pointed at /dev/null so that output
never stops training (``streams``).
"""
