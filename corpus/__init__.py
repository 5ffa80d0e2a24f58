"""corpus: web crawls in, pretraining data and evidence about filtering rules out."""

__version__ = "0.1.0"
