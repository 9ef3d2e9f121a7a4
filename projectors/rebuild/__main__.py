"""`python -m projectors.rebuild`: one rebuild worker process (started by `projectors.rebuild.workers`)."""

import sys

from projectors.rebuild.workers import worker_main

sys.exit(worker_main())
