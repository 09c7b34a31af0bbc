"""Acting from a web push notification (``runbell.flows.push_actions``).

The service worker posts the button a person pressed with the single-use token that came
inside the encrypted push payload. No session and no API key: the token is the
credential, bound to one notification, recipient, run and request version, and expiry.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fastapi import APIRouter

from runbell.api.deps import CoreDep
from runbell.api.openapi import problems
from runbell.api.schemas import PushActionIn
from runbell.flows import push_actions

router = APIRouter(prefix="/v1/push-actions", tags=["notifications"])


@router.post("", responses=problems(401, 403, 404, 409, 410, 413, 422, 503))
def push_action(body: PushActionIn, core: CoreDep) -> Mapping[str, Any]:
    """Use a notification's button once: ``acknowledge`` (as the inbox does), ``snooze``
    (pushed again after the rule's ``snooze_s``, default an hour), ``approve``/``reject``
    (only when the push offered them: the same answer as the web form's, refused when the
    request or run changed since; the browser is then sent the current state). A token
    works once: a second use is a 409, an expired one a 410, one this server did not make
    a 401."""
    return push_actions.act(core, body.token, body.action)
