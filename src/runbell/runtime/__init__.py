"""The process's machinery: what keeps running between requests, on threads and event loops.

The group-commit writer (``writer``), the in-process wake-up hub (``hub``) and its
PostgreSQL LISTEN/NOTIFY bridge (``wakeup``), the Server-Sent Events fan-out (``streams``,
wire format given by the face), the presence registry (``presence``) and the sweep leader
lock (``leader``). Flows use them through the container (``flows.context.Core``); they
use the store's repositories and never decide anything about a run, a request or a person.
"""
