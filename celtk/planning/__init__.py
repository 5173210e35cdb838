"""The planning wing: what a run will cost before it runs. FLOPs per pass (:mod:`celtk.planning.flops`) and the plan
of a whole run (:mod:`celtk.planning.plan`, ``celtk plan``), its memory priced by the activation model below it
(:mod:`celtk.evaluation.activations`), which the memory check every stage makes before its first pass shares
(:mod:`celtk.evaluation.memory`)."""
