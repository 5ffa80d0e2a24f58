"""Quality classifier: the probability that a fastText model gives a document of being reference-quality text.

GPT-3 (Brown et al. 2020, appendix A), Llama 3 (Dubey et al. 2024, section 3.1.1) and DCLM (Li et al. 2024,
section 4.4: fastText on OpenHermes 2.5 + ELI5 against random RefinedWeb) keep the pages such a classifier scores
highest. Train the model with `corpus classifier train` (see the README's recipe), name it in the job file, and
list this rule in `[annotate] rules`. There is no published threshold: select with `score.min` or keep the top
fraction of the run with `score.min_quantile` (e.g. 0.9 keeps the top 10 %).
"""

from __future__ import annotations

import pyarrow as pa

from corpus.engine.run_folder import load_once
from corpus.lab.classifier import QualityModel
from corpus.rulebook import FilePath, Rule, RuleOptions, Signal, register
from corpus.text.batch import DocumentBatch


@register
class QualityClassifier(Rule):
    """fastText quality classifier's probability of reference-quality text (GPT-3, Llama 3, DCLM)."""

    class Options(RuleOptions):
        model: FilePath  # a model from `corpus classifier train`

    name = "quality_classifier"
    signals = (Signal("score", pa.float32(), "probability of the positive (reference-quality) class"),)
    opt_in = True

    @classmethod
    def check(cls, options: Options) -> None:
        load_once(QualityModel, options.model)  # a missing or corrupt file, or other labels, fail at job load

    def compute(self, docs: DocumentBatch) -> dict:
        return {"score": load_once(QualityModel, self.options.model).scores(docs.texts)}  # once per worker
