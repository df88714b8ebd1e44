"""workbench: a research workbench for finding fast GPU kernels."""

__version__ = "0.1.0"
# Bumped whenever a change could alter what the harness measures or accepts; stored with every evaluation.
HARNESS_VERSION = "1"
