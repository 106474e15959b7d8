"""Beliefs: pure distillation from stored items to beliefs (learnings tagged ``belief``)."""
