"""The screening wing: engines that score head sets exactly on examples (*screeners*) and cheap proxies that
order heads without scoring each one (*rankers*). Stage 1 (:mod:`celtk.run.screen`) runs a screener over every
head; its result, one row per head, is the *screen*.

* :mod:`celtk.screening.cached`: the cached teacher-forced screener (shared-prefix KV cache, many head sets per
  forward pass, the prefix tree for stage 2's sets).
* :mod:`celtk.screening.plain`: the plain reference path (a full forward per set) the cached screener is held to.
* :mod:`celtk.screening.layer_replay`: decoder layers re-run from captured inputs, rows ablated by masks (both
  screeners).
* :mod:`celtk.screening.kv_stand_ins`: the stand-in KV caches the cached screener hands its layers.
* :mod:`celtk.screening.row_ablations`: what each row of a cached pass ablates under the screener's ablation kind.
* :mod:`celtk.screening.tree_walk`: the prefix tree walked over the layers, groups of nodes as rows of one pass.
* :mod:`celtk.screening.fused`: the fused replay of a decoder layer that the cached screener uses where it can.
* :mod:`celtk.screening.prefix_tree`: head sets grouped by shared layers, so common prefixes are computed once.
* :mod:`celtk.screening.generation`: the generation screener for generation-graded tasks.
* :mod:`celtk.screening.racing`: the racing screen's elimination (scores heads on growing chunks).
* :mod:`celtk.screening.rankers`: the rankers (signed gate gradients, LASSO over random knockouts).
* :mod:`celtk.screening.registry`: ``SCREENERS`` and ``RANKERS`` by name.

Importing this package imports nothing heavy; each module loads torch itself.
"""
