"""The run store: what a run directory holds and how it is read back, below every reader.

* :mod:`~celtk.store.files` — atomic writes, bounded reads, locks and fingerprints
* :mod:`~celtk.store.documents` — typed result documents (``screen.json``, ``selection.json``, …), one module per
  family, each read back only if its bytes are the ones celtk wrote (``digests.json``)
* :mod:`~celtk.store.directory` — :class:`~celtk.store.directory.RunDirectory`: a run's files, its lock and the
  held-out contract, checked for each stage by :mod:`~celtk.store.rules` (one typed table keyed by stage)
* :mod:`~celtk.store.heldout` — the held-out log (every look), anchored in :mod:`~celtk.store.ledger`, the
  machine-wide ledger of frozen held-out sets
* :mod:`~celtk.store.integrity` — same-run checks between documents (a selection on its screen, a test of its
  selection)
* :mod:`~celtk.store.memo` — :class:`~celtk.store.memo.SetMemo`, the resumable store of head-set outcomes

The stages (:mod:`celtk.run`) write through it; the report, the analysis and the theory read it without importing
the stages. It loads no model: a session is seen only through :class:`~celtk.store.directory.DrawnSession`, a
screener through :class:`~celtk.store.memo.SetScreener`.
"""
