"""Where the workbench keeps and finds files: one resolver for each.

Writable state lives under the home, `$WORKBENCH_HOME` (default `~/.workbench`): the store, candidate files, GPU locks,
trained surrogates. Read-only measured data (the H200 dataset, device ceilings, the suite benchmark) ships in the
`results/` folder of a workbench checkout; `$WORKBENCH_DATA` points elsewhere (an installed package has no checkout
beside it, so it must be set there).
"""
from __future__ import annotations

import os
from pathlib import Path

_CHECKOUT_RESULTS = Path(__file__).resolve().parents[2] / "results"


class DataNotFound(FileNotFoundError):
    pass


def home() -> Path:
    return Path(os.environ.get("WORKBENCH_HOME") or Path.home() / ".workbench").expanduser()


def store_path() -> Path:
    """`$WORKBENCH_STORE` if set (a file), else `<home>/store.sqlite`."""
    explicit = os.environ.get("WORKBENCH_STORE")
    return Path(explicit).expanduser() if explicit else home() / "store.sqlite"


def candidate_dir() -> Path:
    return home() / "candidates"


def lock_dir() -> Path:
    return home() / "locks"


def ray_files_dir() -> Path:
    return home() / "ray_files"


def surrogate_path() -> Path:
    """Where `workbench surrogate train` saves the learned surrogate and searches load it from."""
    return home() / "surrogates" / "learned.pkl"


def data_dir() -> Path:
    """The measured-data root: `$WORKBENCH_DATA`, else the checkout's `results/`."""
    explicit = os.environ.get("WORKBENCH_DATA")
    if explicit:
        return Path(explicit).expanduser()
    if _CHECKOUT_RESULTS.is_dir():
        return _CHECKOUT_RESULTS
    raise DataNotFound("no measured data: the workbench is not running from a checkout (whose results/ holds it); "
                       "set WORKBENCH_DATA to a copy of a checkout's results/ folder")


def dataset_dir() -> Path:
    """The H200 measurement dataset (parquet tables)."""
    return data_dir() / "dataset"


def ceilings_dir() -> Path:
    """Measured device ceilings; `$WORKBENCH_CEILINGS` overrides this one folder."""
    explicit = os.environ.get("WORKBENCH_CEILINGS")
    return Path(explicit).expanduser() if explicit else data_dir() / "ceilings"


def suite_dir() -> Path:
    """The suite benchmark's rows (`experiments/bench_suite.py`)."""
    return data_dir() / "suite"
