"""The thin commands, one module per group: parse options, call one use case (imported inside
the command when it imports torch), render the result.
"""
