"""One TLS context for the suite's httpx calls to its own plain-HTTP servers.

httpx builds a new context, loading the CA bundle (27 ms of CPU), for every ``Client``
and every ``httpx.get()``, whether or not the URL is https. A readiness poll (ten a
second while a ``runbell`` process starts) paid it each time. ``verify=TLS`` gives them
this one instead; the URLs are ``http://127.0.0.1``, so it is never used for a handshake.
"""

from __future__ import annotations

import ssl

TLS = ssl.create_default_context()
