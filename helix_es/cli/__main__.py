"""`python -m helix_es.cli`: the same as the `helix-es` command."""

import sys

from helix_es.cli.main import main

sys.exit(main())
