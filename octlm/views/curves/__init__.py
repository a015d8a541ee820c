"""A run's curves: ASCII charts for the terminal (``plots``) and SVG charts for the report (``charts``), both drawn on
one set of axes (``axes``: ranges, ticks, the logarithmic scale).
"""
