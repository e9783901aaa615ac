"""Every SQL statement builder of storage, in one place a reader can scan.

A builder returns a statement (or a fragment of one) and runs nothing. The
modules that execute them keep only transactions, parameters and turning rows
into values: each statement module is named after the module it serves.
Statements of a fixed shape are module constants taking their values as bind
parameters; the others are functions whose arguments are their shape, which
the executors build once per shape through
:func:`drover.storage._sql.statement` where they run often. Ids travel as one
parameter (:func:`drover.storage.statements.ids.ids_param`, bound to
:func:`drover.storage._sql.ids_value`). Table definitions stay in
:mod:`drover.storage.schema`, the Alembic migrations in
``drover/storage/migrations/``; ``tests/test_layout.py`` checks that no other
storage module builds a statement.

The coordinator's hot path:

- :mod:`~drover.storage.statements.fetch`: a lifecycle handler's targets, the
  children of a batch, and the claims of several coordinators (PostgreSQL).
- :mod:`~drover.storage.statements.apply`: the apply's compare-and-set on
  entities, tries and budgets, the moves of their children (and a scheduler's
  kernel placements), ``result``, ``data`` and the history.
- :mod:`~drover.storage.statements.promote`: the entities a promotion rule
  matches (one builder, shared by the probe and the promoting update).

Fragments they are built from:

- :mod:`~drover.storage.statements.ids`: a list of ids as one bind parameter
  (``json_each`` on SQLite, ``= ANY`` on PostgreSQL).
- :mod:`~drover.storage.statements.children`: conditions on an entity's
  children, correlated to its row (the ALL / ANY / NOT_ANY match).
- :mod:`~drover.storage.statements.filters`: candidate filters
  (:mod:`drover.model.filters`) compiled to conditions on the ``entities`` row.

The other storage modules' statements:

- :mod:`~drover.storage.statements.sessions`: sessions and their kernels
  read back (by id, id prefix, status, the dashboard's filters), counts per
  status, the newest id; the session orders (``FETCH_ORDER``, used by the
  fetch and promotions, and the listing orders).
- :mod:`~drover.storage.statements.entities`: entities of any kind: inserting
  them and their links, reading them (by id, kind, name) with their
  children, a spec's merge-patch, the harness's fingerprint.
- :mod:`~drover.storage.statements.kernels`: a backend's reports (the
  kernels' current state, moving them, their runtime, the status changes),
  placing kernels on agents, the resources agents hold, kernels read back.
- :mod:`~drover.storage.statements.history`: the scheduling history and
  status changes read and searched, and pruned in batches.
- :mod:`~drover.storage.statements.ticks`: tick records, handlers' errors,
  the age of each status, and the ``/metrics`` aggregates (with the duration
  histogram's buckets).
- :mod:`~drover.storage.statements.coordinators`: coordinator rows
  (register, heartbeat, stop, take over dead ones, list) and their claims.
- :mod:`~drover.storage.statements.reports`: pushed reports on entities of
  any kind (their current state, moving them, a backend's runtime, the
  status changes); a backend's kernel reports are pushed reports.
- :mod:`~drover.storage.statements.reopen`: what a reopen reads (the entity
  and its parent).
- :mod:`~drover.storage.statements.ending`: what a termination request reads
  (the entities' states, locked on PostgreSQL, and which have children).
- :mod:`~drover.storage.statements.notify`: PostgreSQL's ``pg_notify`` and
  the current schema (the channel's suffix).
- :mod:`~drover.storage.statements.migrate`: creating a PostgreSQL schema and
  asking whether it exists (the migrations themselves are Alembic's).
- :mod:`~drover.storage.statements.queries`: the ping.

Every statement of an entity takes the kind as a value: nothing here is
particular to sessions, except the placement of kernels on agents and the
session and kernel readers that exist for speed.
"""
