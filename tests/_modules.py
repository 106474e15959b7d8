"""The modules holding the contract's wire models (the JSON that crosses a process), for tests over all of them."""

CONTRACT_MODULES = (
    "memory_core.namespace",
    "memory_core.meta",
    "memory_core.items",
    "memory_core.query",
    "memory_core.explore",
    "memory_core.consolidation",
    "memory_core.descriptor",
    "memory_core.lifecycle.documents",
    "memory_core.lifecycle.jobs",
)
