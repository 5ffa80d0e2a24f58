"""Quality classifier: the probability that a fastText model gives a document of being reference-quality text.

GPT-3 (Brown et al. 2020, appendix A), Llama 3 (Dubey et al. 2024, section 3.1.1) and DCLM (Li et al. 2024,
section 4.4: fastText on OpenHermes 2.5 + ELI5 against random RefinedWeb) keep the pages such a classifier scores
highest. Train the model with `corpus classifier train` (see the README's recipe), name it in the job file, and
list this rule in `[annotate] rules`. There is no published threshold: select with `score.min` or keep the top
fraction of the run with `score.min_quantile` (e.g. 0.9 keeps the top 10 %).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa

from corpus.errors import ClassifierError
from corpus.rulebook import FilePath, Rule, RuleOptions, Signal, load_once, register
from corpus.text.batch import DocumentBatch

POSITIVE = "__label__hq"
NEGATIVE = "__label__cc"
MAX_CHARS = 20_000  # bounds the cost of a giant page; an article is judged well before this (~3,000 words)


def normalise(text: str) -> str:
    """The one-line form of a text that the classifier sees, at training and at prediction."""
    return text[:MAX_CHARS].lower().replace("\n", " ")


FASTTEXT_MAGIC, FASTTEXT_VERSION = 793712314, 12


def check_model_file(path: str) -> None:
    """Walk a fastText model file's layout (header, dictionary, matrices) and refuse one that is truncated or not a
    fastText file: fastText's own loader loops forever on a file cut inside its dictionary and silently reads a
    file cut inside its matrices."""
    import mmap
    import struct

    def corrupt(what: str) -> ClassifierError:
        return ClassifierError(f"{path} is not a complete fastText model ({what}); train or copy it again")

    with open(path, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as data:
        try:
            magic, version = struct.unpack_from("<ii", data, 0)
            if (magic, version) != (FASTTEXT_MAGIC, FASTTEXT_VERSION):
                raise corrupt(f"header {magic}, {version}: not a fastText {FASTTEXT_VERSION} model")
            position = 8 + 12 * 4 + 8  # 12 int32 settings and a double
            words, _, _, _, pruned = struct.unpack_from("<iiiqq", data, position)
            position += 28
            for _ in range(words):
                end = data.find(b"\0", position)
                if end < 0:
                    raise corrupt("the dictionary is cut short")
                position = end + 1 + 8 + 1  # the word, its count (int64) and type (int8)
            position += max(pruned, 0) * 8
            quantized = data[position]
            position += 1
            rows, columns = struct.unpack_from("<qq", data, position)
            if quantized:  # a quantized model (.ftz) stores codebooks: its size is not checked further
                return
            position += 16 + rows * columns * 4
            position += 1 + 16 + np.prod(struct.unpack_from("<qq", data, position + 1), dtype=np.int64) * 4
        except (struct.error, IndexError):
            raise corrupt("it ends inside its layout") from None
        if position != len(data):
            raise corrupt(f"{len(data):,} bytes where its layout needs {position:,}")


class QualityModel:
    """A trained model, checked to be a complete supervised fastText model with exactly our two labels."""

    def __init__(self, path: str):
        import fasttext

        if not Path(path).is_file():
            raise ClassifierError(f"model file {path!r} does not exist; train one with `corpus classifier train`")
        check_model_file(path)
        try:
            self._model = fasttext.load_model(path)
        except ValueError as exc:
            raise ClassifierError(f"{path} is not a fastText model: {exc}") from None
        labels = sorted(self._model.get_labels())  # an unsupervised model has none
        if labels != sorted([POSITIVE, NEGATIVE]):
            raise ClassifierError(
                f"{path} has labels {labels}, not {POSITIVE} and {NEGATIVE}: train it with `corpus classifier train`"
            )

    def scores(self, texts: list[str]) -> np.ndarray:
        """The probability of the positive class for each text (float32)."""
        out = np.empty(len(texts), np.float32)
        predict = self._model.f.predict
        for i, text in enumerate(texts):
            # both labels come back (k=2), so the positive's probability is there whichever wins
            predictions = predict(normalise(text) + "\n", 2, 0.0, "replace")
            out[i] = next((p for p, label in predictions if label == POSITIVE), 0.0)
        return np.minimum(out, 1.0)  # fastText's softmax can exceed 1 by a rounding step


@register
class QualityClassifier(Rule):
    """fastText quality classifier's probability of reference-quality text (GPT-3, Llama 3, DCLM)."""

    class Options(RuleOptions):
        model: FilePath  # a model from `corpus classifier train`

    name = "quality_classifier"
    signals = (Signal("score", pa.float32(), "probability of the positive (reference-quality) class", most=1),)
    opt_in = True

    @classmethod
    def check(cls, options: Options) -> None:
        load_once(QualityModel, options.model)  # a missing or corrupt file, or other labels, fail at job load

    def compute(self, docs: DocumentBatch) -> dict:
        return {"score": load_once(QualityModel, self.options.model).scores(docs.texts)}  # once per worker
