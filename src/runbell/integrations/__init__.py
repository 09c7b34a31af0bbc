"""Integrations with agent frameworks, on the client side: each is a thin layer over the
SDK (:mod:`runbell.client`) and never imports the server. Each lives in its own module
and imports its framework only there, so ``import runbell`` never needs one:

- :mod:`runbell.integrations.langgraph`: a LangGraph graph's ``interrupt()`` becomes a
  Runbell input request and the graph resumes with the person's recorded answer
  (``pip install 'runbell[langgraph]'``).
"""
