"""``python -m memory_core …`` runs the ``memory-core`` command line."""

from memory_core.cli import main

main()
