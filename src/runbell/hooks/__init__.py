"""Agent-runtime hooks: Claude Code and OpenAI Codex report to Runbell through the SDK.

:mod:`~runbell.hooks.mapping` is pure (hook payload → what to report),
:mod:`~runbell.hooks.report` carries a plan out with :class:`runbell.client.Client`,
:mod:`~runbell.hooks.claude_code` and :mod:`~runbell.hooks.codex` are the two entry
points behind ``runbell hook claude-code`` / ``runbell hook codex``, and
:mod:`~runbell.hooks.install` builds the settings snippets. Like the SDK, this package is
a client: it never imports the server.
"""
