"""Scoring models without Ray: Hugging Face classifiers loaded by path, texts packed by length, their signals."""
