"""``python -m benchmarks [name ...]``: see benchmarks/README.md."""

import sys

from benchmarks._harness import main

sys.exit(main(sys.argv[1:]))
