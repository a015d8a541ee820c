"""What ``show`` and ``report`` say, as plain data and pages (torch-free): the list (``listing``), one
experiment (``details``), several side by side (``compare``), curves as ASCII (``plots``) and as SVG (``charts``),
both scaled by ``axes``, the expected duration (``estimate``), the dispatch of ``show`` (``show``) and the HTML
notebook page (``report``, ``report_sections``, written by the Jinja2 templates in ``templates/``, autoescaped).
The documents ``show --json`` writes are TypedDicts (``listing.Listing``, ``details.Detail``,
``compare.Comparison``, ``plots.PlotData``); run-file records are ``core.records.RunRecord``.
May import: ``core``, ``config``, ``store``.
"""
