"""The thin commands, one module per group: parse options, call one use case (imported inside
the command when it imports torch), render the result. ``training`` (train, resume, verify-resume, overfit, sample),
``evaluation`` (eval), ``experiments`` (show), ``lifecycle`` (new, rm, archive, unarchive, tag, note), ``boxes``
(pack, unpack, registry export and import), ``sweeps/`` (the sweep group, work, watch), ``report`` (report, export),
``tools`` (doctor, prepare, bench), ``config`` (config keys) and ``canary``.
"""
