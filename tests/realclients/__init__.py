"""The real Claude Code and Codex CLIs (from npm) against a real `runbell serve`, with
only the model replaced by a scripted endpoint on 127.0.0.1 (see
/work/shared/notes/driving-agent-clis.md for the facts these tests rely on)."""
