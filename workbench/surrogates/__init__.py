"""Surrogates: cheap forecasts of a candidate's speedup over an anchor, as `Forecast`s, and the selective policy that
decides which candidates still need the GPU."""
from .forecast import BINS, Forecast, Surrogate, from_log2
from .roofline import RooflineSurrogate
from .selective import DEFER, EXPLORE, MEASURE, SKIP, SelectivePolicy

__all__ = ["BINS", "DEFER", "EXPLORE", "Forecast", "MEASURE", "RooflineSurrogate", "SKIP", "SelectivePolicy",
           "Surrogate", "from_log2"]
