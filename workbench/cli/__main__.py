"""`python -m workbench.cli`."""
import sys

from . import main

sys.exit(main())
