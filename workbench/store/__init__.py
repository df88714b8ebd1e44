"""The embedded SQLite store: problems, candidates and every evaluation, shared by all processes on a machine."""
from .sqlite import SCHEMA_VERSION, Store, default_store_path

__all__ = ["Store", "default_store_path", "SCHEMA_VERSION"]
