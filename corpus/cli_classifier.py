"""`corpus classifier`: train a quality classifier (fastText, or a head on an encoder) and evaluate one."""

from __future__ import annotations

import argparse
import sys
from dataclasses import fields

from rich.console import Console
from rich.table import Table

from corpus.lab.classifier import TrainOptions
from corpus.models.training import HeadOptions

# Flags both kinds read, each kind with its own default (fastText's TrainOptions, the encoder head's HeadOptions).
SHARED_FLAGS = ("epochs", "lr", "validation", "seed")
SOURCES = "documents Parquet (files or a run's documents/), JSONL, or text files (a document a line)"


def add_classifier_commands(commands) -> None:
    classifier = commands.add_parser("classifier", help="train or evaluate a quality classifier")
    classifier_commands = classifier.add_subparsers(dest="classifier_command", required=True)
    train = classifier_commands.add_parser(
        "train",
        help="fastText: reference text (positive) against crawl; encoder: a head on a frozen encoder (FineWeb-Edu's)",
    )
    train.add_argument("--kind", choices=["fasttext", "encoder", "static"], default="fasttext",
                       help="encoder: a head on a frozen transformer; static: a linear head on model2vec's static "
                       "embeddings, thousands of documents a second a core (%(default)s)")  # fmt: skip
    train.add_argument("--positive", nargs="+", help=SOURCES)
    train.add_argument("--negative", nargs="+", help=SOURCES)
    train.add_argument("--out", required=True, help="fasttext: the model file (its report beside it, .json); "
                                                    "encoder: the folder to save the model in")  # fmt: skip
    for option in fields(TrainOptions):
        flag = f"--{option.name.replace('_', '-')}"
        if isinstance(option.default, bool):
            train.add_argument(flag, action="store_true", help="fasttext (off)")
        elif option.name in SHARED_FLAGS:
            kinds = f"(fasttext: {option.default}; encoder: {getattr(HeadOptions, option.name)})"
            train.add_argument(flag, type=type(option.default), default=None, help=kinds)
        else:
            train.add_argument(flag, type=type(option.default), default=option.default, help="fasttext (%(default)s)")
    encoder = train.add_argument_group("--kind encoder and --kind static")
    encoder.add_argument("--encoder", help="the encoder's folder (save_pretrained: BERT, RoBERTa, XLM-R; static: a "
                         "model2vec folder)")  # fmt: skip
    encoder.add_argument("--labelled", help="a Parquet or JSONL file of texts and their labels (instead of sets)")
    encoder.add_argument("--label-field", default="label", help="the labels' column or field (%(default)s)")
    encoder.add_argument("--head", choices=["regression", "classes"], help="default: regression for numeric "
                         "labels, classes otherwise (and for --positive/--negative)")  # fmt: skip
    encoder.add_argument("--max-tokens", type=int, default=512, help="(%(default)s)")
    encoder.add_argument("--threshold", type=float, default=3.0, help="regression: positive at or above (%(default)s)")
    train.set_defaults(handler=_train)
    distil = classifier_commands.add_parser(
        "distil", help="a fastText student of one of a run's models, learned from its scores on a sample of the run"
    )
    distil.add_argument("run", help="a finished run's folder (its documents and its job's [models.NAME])")
    distil.add_argument("--teacher", required=True, help="the job's model to distil (a [models.NAME] name)")
    distil.add_argument("--out", required=True, help="the student's fastText file (its reports beside it)")
    distil.add_argument("--sample", type=int, default=20_000, help="documents the teacher scores (%(default)s)")
    distil.add_argument("--threshold", type=float, default=3.0, help="the teacher's score of a yes (%(default)s)")
    distil.add_argument("--seed", type=int, default=0, help="(%(default)s)")
    static = "a model2vec folder: the student is a ridge regression of the teacher's scores on its embeddings, saved "
    distil.add_argument("--static-encoder", default="", help=static + "as a folder (default: a fastText file)")
    distil.set_defaults(handler=_distil)
    evaluate = classifier_commands.add_parser("eval", help="score a labelled set with a fastText model")
    evaluate.add_argument("model")
    evaluate.add_argument("--positive", nargs="+", required=True, help=SOURCES)
    evaluate.add_argument("--negative", nargs="+", required=True, help=SOURCES)
    for command in (train, evaluate):
        command.add_argument("--text-field", default="text", help="the texts' column or JSONL field (%(default)s)")
    evaluate.set_defaults(handler=_evaluate)


def _train(args: argparse.Namespace) -> int:
    from corpus.errors import ClassifierError

    try:
        return _train_fasttext(args) if args.kind == "fasttext" else _train_encoder_head(args)
    except ClassifierError as exc:
        print(f"corpus: {exc}", file=sys.stderr)
        return 2


def _train_fasttext(args: argparse.Namespace) -> int:
    from corpus.errors import ClassifierError
    from corpus.lab.classifier import read_texts, report_path, train

    if not args.positive or not args.negative:
        raise ClassifierError("--kind fasttext learns reference text against crawl: give --positive and --negative")
    given = {name: getattr(args, name) for name in SHARED_FLAGS if getattr(args, name) is not None}
    own = {f.name: getattr(args, f.name) for f in fields(TrainOptions) if f.name not in SHARED_FLAGS}
    options = TrainOptions(**own, **given)
    positives, negatives = (read_texts(paths, args.text_field) for paths in (args.positive, args.negative))
    report = train(positives, negatives, args.out, options)
    _print_metrics(f"held out ({options.validation:.0%} of each class)", report["held_out"])
    size = report["model_bytes"] / 1e6
    print(
        f"wrote {args.out} ({size:,.0f} MB) and {report_path(args.out)} (trained in {report['train']['seconds']:.1f} s)"
    )
    if size > 100 and not args.quantize:
        print(
            f"note: the model is {size:,.0f} MB, {args.bucket:,} n-gram rows x {args.dim} floats whatever the data; "
            "--quantize makes it ~7x smaller (and --bucket 200000 suits a few thousand documents)"
        )
    return 0


def _train_encoder_head(args: argparse.Namespace) -> int:
    from corpus.errors import ClassifierError
    from corpus.lab.classifier import read_texts
    from corpus.models.static_head import train_static_head
    from corpus.models.training import REPORT, HeadOptions, read_labelled, train_head

    if not args.encoder:
        raise ClassifierError(f"--kind {args.kind} trains a head on an encoder: give its folder with --encoder")
    if args.labelled:
        texts, labels = read_labelled(args.labelled, args.text_field, args.label_field)
        numeric = all(isinstance(label, int | float) and not isinstance(label, bool) for label in labels)
        head = args.head or ("regression" if numeric else "classes")
    elif args.positive and args.negative:
        positives, negatives = (read_texts(paths, args.text_field) for paths in (args.positive, args.negative))
        texts, labels = positives + negatives, ["positive"] * len(positives) + ["negative"] * len(negatives)
        head = args.head or "classes"
    else:
        raise ClassifierError("give a labelled file (--labelled FILE --label-field NAME), or --positive and --negative")
    given = {name: getattr(args, name) for name in SHARED_FLAGS if getattr(args, name) is not None}
    options = HeadOptions(head=head, max_tokens=args.max_tokens, threshold=args.threshold, **given)
    trainer = train_static_head if args.kind == "static" else train_head
    report = trainer(args.encoder, texts, labels, args.out, options)
    held = {key: value for key, value in report["held_out"].items() if key != "confusion"}
    _print_metrics(f"held out ({options.validation:.0%} of the documents)", held)
    confusion = report["held_out"]["confusion"]
    table = Table(title="confusion (rows: true, columns: predicted)")
    table.add_column("")
    for label in confusion["labels"]:
        table.add_column(str(label), justify="right")
    for label, row in zip(confusion["labels"], confusion["rows_true_columns_predicted"], strict=True):
        table.add_row(str(label), *(str(count) for count in row))
    Console(soft_wrap=True).print(table)
    print(f"wrote {args.out} (a {head} head; name it in a job as [models.NAME] model) and {args.out}/{REPORT}")
    return 0


def _distil(args: argparse.Namespace) -> int:
    from corpus.errors import ClassifierError, JobError
    from corpus.lab.distillation import distil

    try:
        report = distil(args.run, args.teacher, args.out, args.sample, args.threshold, args.seed,
                        static_encoder=args.static_encoder)  # fmt: skip
    except (ClassifierError, JobError) as exc:
        print(f"corpus: {exc}", file=sys.stderr)
        return 2
    teacher, student, held = report["teacher"], report["student"], report["held_out"]
    _print_metrics(f"student against teacher, {held['documents']} held-out documents", held)
    print(
        f"teacher {teacher['model']}: {teacher['documents']} documents at {teacher['documents_per_s']:,} documents/s; "
        f"student: {student['documents_per_s']:,} documents/s on one core"
    )
    values = "" if args.static_encoder else "  class_values = { hq = 1, cc = 0 }\n"
    print(
        f"wrote {args.out}; score the whole run with it by adding to the job\n"
        f'  [models.{args.teacher}_student]\n  model = "{args.out}"\n{values}'
        "and running it again: only the student scores (every other phase is done)"
    )
    return 0


def _evaluate(args: argparse.Namespace) -> int:
    from corpus.errors import ClassifierError
    from corpus.lab.classifier import QualityModel, evaluate, read_texts

    try:
        positives, negatives = (read_texts(paths, args.text_field) for paths in (args.positive, args.negative))
        result = evaluate(QualityModel(args.model), positives, negatives)
    except ClassifierError as exc:
        print(f"corpus: {exc}", file=sys.stderr)
        return 2
    _print_metrics(args.model, result)
    return 0


def _print_metrics(title: str, result: dict) -> None:
    table = Table(title=title)
    for name in result:
        table.add_column(name, justify="right")
    table.add_row(*(str(value) for value in result.values()))
    Console(soft_wrap=True).print(table)
