"""octlm: train miniature decoder-only language models with a loop that resumes exactly."""

__version__ = "0.1.0"
