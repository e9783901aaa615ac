"""Every SQL statement builder of the coordinator's hot path, in one place a reader can scan.

A builder returns a statement and runs nothing: the modules that execute them
(:mod:`drover.storage.fetch`, :mod:`drover.storage.apply`) build each one
once per shape through :func:`drover.storage._sql.statement` and bind its
values, ids as one parameter (:func:`drover.storage._sql.ids_value`).

- :mod:`drover.storage.statements.fetch`: a lifecycle handler's targets, the
  children of a batch, and the claims of several coordinators (PostgreSQL).
- :mod:`drover.storage.statements.apply`: the apply's compare-and-set on
  entities, tries and budgets, the moves of their children (and a scheduler's
  kernel placements), ``result``, ``data`` and the history.
- :mod:`drover.storage.statements.promote`: the entities a promotion rule
  matches (one builder, shared by the probe and the promoting update).

Every statement takes the kind as a value: nothing here is particular to
sessions, except the placement of kernels on agents.
"""
