"""The use cases: one module per flow, each a handful of functions that take the process's
dependencies (:class:`~runbell.flows.context.Core`, or just the database) and a
principal, own the transaction, and return views (plain dicts) for the faces to render.

The faces (``runbell.api``, ``runbell.web``, ``runbell.cli``, the worker and scheduler in
``runbell.dispatch``) parse, authenticate and call one flow; flows call the repositories
in ``runbell.store`` and the pure decisions in ``runbell.domain``. Each module's docstring
says which invariants of DESIGN §2 it keeps. ``docs/architecture.md`` has the map.
"""
