"""The command line, the one place that composes the library and the projector service.

One module per command (`demo`, `project`, `lag`, `audit`, `forget`, `rebuild`), each with
`add_command(subparsers)`; `main` builds the parser from them.
"""

from helix_es.cli.main import main

__all__ = ["main"]
