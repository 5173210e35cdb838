"""The search wing: scores and the ranking key (:func:`celtk.search.scores.head_order`, the one spelling),
Algorithm 1 (:mod:`celtk.search.selection`), the search strategies and their registry
(:mod:`celtk.search.strategies`, :mod:`celtk.search.registry`), selection stability
(:mod:`celtk.search.stability`) and the null calibration (:mod:`celtk.search.nulls`).

Pure numpy: nothing here imports torch (a test imports every module of the package in a fresh process and
checks), so the search logic runs wherever numpy does.
"""
