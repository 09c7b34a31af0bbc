"""The MCP face: Runbell's tools for a model, over stdio (``runbell mcp``) and streamable
HTTP (``/mcp`` in the app).

- :mod:`~runbell.mcp.backend`: the interface the tools are written against, with its
  problem type; two implementations keep stdio and HTTP from drifting:
  :mod:`~runbell.mcp.local` (in-process flows, for ``/mcp``) and
  :mod:`~runbell.mcp.remote` (HTTP to a remote Runbell, for ``runbell mcp``);
- :mod:`~runbell.mcp.tools`: the six tools, the server's instructions and the bounded,
  resumable waits, built once on the official ``mcp`` SDK's ``MCPServer``;
- :mod:`~runbell.mcp.tasks`: MCP Tasks (the ``io.modelcontextprotocol/tasks`` extension)
  for the two long tools, their task ids naming Runbell's durable state;
- :mod:`~runbell.mcp.http`: the ``/mcp`` mount (bearer auth with the API's keys and user
  tokens, tenant-scoped).
"""
