"""The web app face: server-rendered pages, static files, the service worker and the API
reference, added to the application ``runbell.app.create_app`` builds.

Server-rendered (Jinja2) and usable without JavaScript for reading and answering; a
small script adds live updates, countdowns and browser notifications. One module per
part of the app, each with its routes (no ``/v1`` prefix, not in the OpenAPI document):

- :mod:`~runbell.web.signin`: ``/login``, ``/auth/{token}``, ``/logout``
- :mod:`~runbell.web.inbox`: ``/`` and acknowledging from it
- :mod:`~runbell.web.runs_page`: ``/runs``, the runs overview
- :mod:`~runbell.web.run_page`: ``/runs/{run_id}``, deep links ``/n/{id}``, answering
- :mod:`~runbell.web.ledger`: the run page's Operations section (and the history of an
  operation that was in doubt)
- :mod:`~runbell.web.cancel_form`: cancelling from the run page
- :mod:`~runbell.web.amend_form`: proposing a change from the run page
- :mod:`~runbell.web.edit_form`: approving an edited value from the run page
- :mod:`~runbell.web.delegation_form`: revoking a delegated token from the run page
- :mod:`~runbell.web.schedules_page`: ``/schedules`` and ``/schedules/{id}``, scheduled
  work: list, create, a new instruction version, pause, resume, revoke
- :mod:`~runbell.web.settings`: ``/settings`` and what hangs off it
- :mod:`~runbell.web.people_page`: ``/people``, members and their subject grants (admins)
- :mod:`~runbell.web.assets`: ``/sw.js``, ``/favicon.ico``, ``/static``
- :mod:`~runbell.web.apidocs`: ``/docs`` and ``/redoc``

Around them: :mod:`~runbell.web.forms` (sessions, forms, CSRF), :mod:`~runbell.web.viewer`
(who is looking; message pages), :mod:`~runbell.web.wording`, :mod:`~runbell.web.templating`,
:mod:`~runbell.web.language` (``Accept-Language`` before sign-in).
What the pages show is read by :mod:`runbell.flows.pages`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from fastapi import FastAPI


def install(app: FastAPI) -> None:
    """Add the pages, static files, the service worker and ``/docs`` + ``/redoc``."""
    from fastapi.staticfiles import StaticFiles

    from runbell.api import routing
    from runbell.web import apidocs, assets, forms, language

    routing.include(app, include_routers)
    app.mount("/static", StaticFiles(directory=assets.STATIC_DIR), name="static")
    forms.install_handlers(app)
    app.add_middleware(language.AcceptLanguage)
    apidocs.install(app)


def include_routers(app: FastAPI) -> None:
    """The pages' routers, in matching order (added through ``runbell.api.routing``)."""
    from runbell.web import (
        amend_form,
        assets,
        cancel_form,
        delegation_form,
        edit_form,
        inbox,
        people_page,
        run_page,
        runs_page,
        schedules_page,
        settings,
        signin,
    )

    parts = (
        signin,
        inbox,
        runs_page,
        run_page,
        cancel_form,
        amend_form,
        delegation_form,
        edit_form,
        schedules_page,
        settings,
        people_page,
        assets,
    )
    for part in parts:
        app.include_router(part.router)
