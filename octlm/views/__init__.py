"""What ``octlm show``, ``octlm report`` and ``octlm watch`` say, as plain data and pages (torch-free): the list
(``listing/``: its columns in one spec, its rows, its filters), one experiment (``details``), several side by side
(``side_by_side``), paired differences on the same blocks (``paired``), the verdicts on differences (``compare/``:
Student's t, one record and wording of every verdict, configurations over their seeds, comparability, a sweep's
winner), curves as ASCII and as SVG on one set of axes (``curves/``), the expected duration (``estimate``), the
dispatch of ``octlm show`` (``show``), the HTML notebook page (``report/``: one experiment, several, a sweep; written
by the Jinja2 templates in ``templates/``, autoescaped), and sweeps (``sweeps/``: a sweep's status and ranking, seed
replicates and their noise, the live view's data). The documents ``octlm show --json`` writes are TypedDicts
(``listing.Listing``, ``details.Detail``, ``side_by_side.Comparison``, ``curves.plots.PlotData``,
``sweeps.status.SweepRanking``; an experiment of the list is made from the column spec); run-file records are
``core.records.RunRecord``.
May import: ``core``, ``config``, ``store``.
"""
