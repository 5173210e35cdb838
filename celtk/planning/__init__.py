"""The planning wing: what a run will cost before it runs. FLOPs per pass (:mod:`celtk.planning.flops`), the
activation memory each stage holds (:mod:`celtk.planning.activations`), and the plan of a whole run with the
memory check every stage makes before its first pass (:mod:`celtk.planning.plan`, ``celtk plan``)."""
