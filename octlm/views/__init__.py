"""What ``show`` and ``report`` say, as plain data and pages (torch-free): the list (``listing``), one
experiment (``details``), several side by side (``compare``), curves (``plots``, ``charts``), the expected duration
(``estimate``), the dispatch of ``show`` (``show``) and the HTML notebook page (``report``).
May import: ``core``, ``config``, ``store``.
"""
