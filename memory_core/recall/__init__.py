"""Holistic recall: several scopes read concurrently, rendered as one token-budgeted ``ContextPack``."""
