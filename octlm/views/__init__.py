"""What ``show`` and ``report`` say, as plain data and pages (torch-free): the list (``listing``), one
experiment (``details``), several side by side (``compare``), curves (``plots`` as ASCII, ``charts`` as SVG,
both scaled by ``axes``), the expected duration (``estimate``), the dispatch of ``show`` (``show``) and the HTML
notebook page (``report``, ``report_sections``, written by the Jinja2 templates in ``templates/``, autoescaped).
May import: ``core``, ``config``, ``store``.
"""
