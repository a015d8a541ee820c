"""What ``show``, ``report`` and ``watch`` say, as plain data and pages (torch-free): the list (``listing``), one
experiment (``details``), several side by side (``side_by_side``, paired on the same blocks by ``paired``), the
verdicts on their differences (``compare/``: Student's t, one record and wording of every verdict, configurations over
their seeds, comparability, a sweep's winner), curves as ASCII (``plots``) and as SVG (``charts``),
both scaled by ``axes``, the expected duration (``estimate``), the dispatch of ``show`` (``show``), the HTML
notebook page (``report/``: one experiment, several, a sweep; written by the Jinja2 templates in ``templates/``,
autoescaped), and sweeps (``sweeps/``: a sweep's status and ranking, seed replicates and their noise, the live
view's data). The documents ``show --json`` writes are TypedDicts (``listing.Listing``, ``details.Detail``,
``side_by_side.Comparison``, ``plots.PlotData``, ``sweeps.status.SweepRanking``); run-file records are
``core.records.RunRecord``.
May import: ``core``, ``config``, ``store``.
"""
