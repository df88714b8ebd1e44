"""Surrogates: cheap forecasts of a candidate's speedup over an anchor, as `Forecast`s, and the selective policy that
decides which candidates still need the GPU. The learned one (LightGBM, trained on the measured dataset) is
`learned.LearnedSurrogate`; `evaluate` scores any of them on held-out splits of the dataset."""
from ..core.outcomes import BINS, Forecast, from_log2
from .forecast import Surrogate, SurrogateForecast
from .learned import LearnedSurrogate
from .roofline import RooflineSurrogate
from .selective import DEFER, EXPLORE, MEASURE, SKIP, SelectivePolicy

__all__ = ["BINS", "DEFER", "EXPLORE", "Forecast", "LearnedSurrogate", "MEASURE", "RooflineSurrogate", "SKIP",
           "SelectivePolicy", "Surrogate", "SurrogateForecast", "from_log2"]
