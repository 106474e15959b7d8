"""Runnable examples (``python -m memory_core.examples.agent_loop``)."""
