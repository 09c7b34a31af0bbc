"""The web app: server-rendered pages, static files and the service worker.

``runbell.web.routes.install(app)`` adds it to the API application. Nothing is imported
here, so the API's auth dependencies can use ``runbell.web.sessions`` without a cycle.
"""
