"""The SQL statements shared by several storage modules.

A storage service builds its own statements beside the code that runs them
(:mod:`drover.storage.entity_reads`, :mod:`~drover.storage.history`,
:mod:`~drover.storage.reports`…); what more than one module runs, or builds
from, is here (``tests/test_layout.py`` checks that every module here has
several users). A builder returns a statement (or a fragment of one) and runs
nothing. Statements of a fixed shape are module constants taking their values
as bind parameters; the others are functions whose arguments are their shape,
built once per shape through :func:`drover.storage._sql.statement` where they
run often. Ids travel as one parameter (:func:`~drover.storage.statements.ids.ids_param`,
bound to :func:`drover.storage._sql.ids_value`).

The coordinator's hot path:

- :mod:`~drover.storage.statements.fetch`: a lifecycle handler's targets and
  the claims of several coordinators (PostgreSQL).
- :mod:`~drover.storage.statements.apply`: the apply's compare-and-set on
  entities, tries and budgets, the moves of their children (and a
  scheduler's placements), ``result``, ``data`` and the history.
- :mod:`~drover.storage.statements.promote`: the entities a promotion rule
  matches (one builder, shared by the probe and the promoting update).
- :mod:`~drover.storage.statements.coordinators`: coordinator rows, the solo
  lease and claims per coordinator (the daemon's store, the tick store's
  fence checks, the stats).

Fragments they are built from:

- :mod:`~drover.storage.statements.ids`: a list of ids as one bind parameter
  (``json_each`` on SQLite, ``= ANY`` on PostgreSQL).
- :mod:`~drover.storage.statements.children`: conditions on an entity's
  children, correlated to its row (the ALL / ANY / NOT_ANY match).
- :mod:`~drover.storage.statements.filters`: candidate filters
  (:mod:`drover.model.filters`) compiled to conditions on the ``entities`` row.

Every statement takes the kind as a value: nothing in storage is particular to
one kind (a kind's own fast reader, :attr:`drover.model.kinds.EntityKind.reader`,
is declared by its package).
"""
