"""The run report as one self-contained HTML page (its figures embedded as data URIs), from `report_data`."""

from __future__ import annotations

import html

from corpus.report.run_report import TOKENS_NOTE


def _table(headers: list[str], rows: list[list]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(f'{c:,}' if isinstance(c, int) else str(c))}</td>" for c in row) + "</tr>"
        for row in rows
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _blank(value) -> int | str:
    return "" if value is None else value


def _documents_html(documents: list[dict]) -> str:
    items = []
    for doc in documents:
        failing = {reason.rsplit(".", 1)[0] for reason in doc["failures"]}
        signals = ", ".join(
            (f"<b class=failed>{html.escape(shown)}</b>" if name in failing else html.escape(shown))
            for name, value in doc["signals"].items()
            for shown in [f"{name} = {value:.4g}" if isinstance(value, float) else f"{name} = {value}"]
        )
        label = f" <span class=label>{html.escape(doc['span_label'])}</span>" if doc["span_label"] else ""
        where = " (in the URL)" if doc["span_in_url"] else ""
        duplicate = f"<div>duplicate of {html.escape(doc['duplicate_of'])}</div>" if doc["duplicate_of"] else ""
        if doc["before_extraction"]:
            duplicate += f"<div>dropped before extraction (no text): {html.escape(doc['before_extraction'])}</div>"
        excerpt = f"{html.escape(doc['before'])}<mark>{html.escape(doc['match'])}</mark>{html.escape(doc['after'])}"
        items.append(
            f"<li><div class=url>{html.escape(doc['url'] or doc['id'])}</div><div class=signals>{signals}"
            f"{label}{where}</div>{duplicate}<pre>{excerpt}</pre></li>"
        )
    return f"<ul class=docs>{''.join(items)}</ul>" if items else "<p>none</p>"


STYLE = """body{font-family:system-ui,sans-serif;margin:2em;color:#222;max-width:1200px;overflow-wrap:anywhere}
.figures{display:flex;flex-wrap:wrap}
table{border-collapse:collapse;margin:0.5em 0 1.5em}td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}
th{background:#f3f3f3}td:first-child{text-align:left}.figures img{margin:4px;border:1px solid #eee}
ul.docs{list-style:none;padding:0}ul.docs li{border-left:3px solid #e45756;margin:0.6em 0;padding-left:0.6em}
.url{font-weight:600}.signals{color:#555;font-size:90%}.label{background:#fde2e1;padding:0 4px}
pre{white-space:pre-wrap;background:#fafafa;padding:0.4em;font-size:85%}mark{background:#ffd54f}
th,td:first-child{white-space:nowrap;overflow-wrap:normal}.wide{overflow-x:auto}.failed{color:#c0392b}
nav.contents{position:sticky;top:0;background:#fff;padding:0.4em 0;border-bottom:1px solid #ddd}"""

# Marks <body> with how many images loaded, how many failed, the page's width and whether the overlap table fits
# without scrolling: a headless browser test reads them.
IMAGE_CHECK = """window.addEventListener("load", function () {
  var images = Array.from(document.images);
  document.body.dataset.images = images.length;
  var broken = images.filter(function (i) { return !(i.complete && i.naturalWidth > 0); });
  document.body.dataset.brokenImages = broken.length;
  document.body.dataset.pageWidth = document.documentElement.scrollWidth;
  var wide = document.querySelector(".wide");
  document.body.dataset.overlapFits = wide === null || wide.scrollWidth <= wide.clientWidth;
});"""


SECTIONS = (
    ("funnel", "Funnel"),
    ("languages", "Languages"),
    ("scores", "Model scores"),
    ("contamination", "Contamination"),
    ("rules", "Rules: what each drops"),
    ("overlap", "Overlap between rules"),
    ("dedup", "Dedup"),
    ("signals", "Signals"),
    ("dropped", "Dropped documents"),
    ("near", "Kept documents nearest each threshold"),
    ("domains", "Domains by documents dropped"),
)


def _contents(with_dedup: bool, with_languages: bool, with_scores: bool, with_contamination: bool) -> str:
    """The page's sections as links: a report of a large run is tens of thousands of pixels long."""
    shown = {"dedup": with_dedup, "languages": with_languages, "scores": with_scores,
             "contamination": with_contamination}  # fmt: skip
    links = [f"<a href='#{key}'>{html.escape(name)}</a>" for key, name in SECTIONS if shown.get(key, True)]
    return f"<nav class=contents>{' · '.join(links)}</nav>"


def _languages_html(languages: list[dict]) -> str:
    """The funnel per language: what each rule dropped first, what is kept, and whose thresholds applied."""
    if not languages:
        return ""
    rows = [
        [
            row["language"],
            row["documents"],
            ", ".join(f"{rule} {n}" for rule, n in row["dropped_by"].items()) or "–",
            row["kept"],
            row["kept_words"],
            "its own (per_language)" if row["thresholds"] == "per_language" else "the job's",
        ]
        for row in languages
    ]
    note = "<p>Keys as FineWeb-2 writes them (ISO 639-3 and script), from language ID and the text's script.</p>"
    headers = ["language", "documents", "dropped first by", "kept", "kept words", "thresholds"]
    return "<h2 id=languages>Languages</h2>" + note + _table(headers, rows)


def _scores_html(tables: list[dict], with_tokens: bool) -> str:
    """Each model score by decile, each buckets by bucket: documents, and what the selection kept of them."""
    if not tables:
        return ""
    note = (
        "Deciles of each model's scores over the documents it scored, and each buckets' buckets: how much of the "
        "corpus, and of what the selection keeps, each part holds."
    )
    parts = [f"<h2 id=scores>Model scores</h2><p>{note}</p>"]
    units = ["kept_words", "kept_tokens"] if with_tokens else ["kept_words"]
    for table in tables:
        unscored = f" ({table['unscored']} documents unscored)" if table["unscored"] else ""
        rows = [[row["part"], "" if row["low"] is None else f"{row['low']:.4g} – {row['high']:.4g}", row["documents"],
                 row["kept"], *(row[unit] for unit in units)] for row in table["rows"]]  # fmt: skip
        parts.append(f"<h3>{html.escape(table['column'])}{unscored}</h3>")
        parts.append(_table(["part", "scores", "documents", "kept", *(u.replace("_", " ") for u in units)], rows))
    return "".join(parts)


def _contamination_html(rows: list[dict]) -> str:
    """Per evaluation set found: items, documents holding them, those dropped, the domains with most."""
    if not rows:
        return ""
    return (
        "<h2 id=contamination>Contamination</h2><p>evaluation sets whose items share an n-gram with the run's "
        "documents (of: the set's items; too short: items with fewer words than the n-gram, not looked for); "
        "`corpus inspect RUN --rule decontamination` shows the matching spans.</p>"
        + _table(["set", "items found", "of", "too short", "documents", "dropped", "domains with most"],
                 [[r["set"], r["items"], _blank(r["of"]), _blank(r["too_short"]), r["documents"], r["dropped"],
                   r["domains"]] for r in rows])
    )  # fmt: skip


def render_html(data: dict, figures: dict[str, str]) -> str:
    """The report as one HTML page, its figures embedded as data URIs."""
    title = f"corpus report · {data['job']}" + (" · hypothetical selection" if data["hypothetical"] else "")
    with_tokens = data["funnel"][-1]["tokens"] is not None
    early = bool(data["before_extraction"])
    units = ["words", "tokens"] if with_tokens else ["words"]
    overlap = data["overlap"]
    parts = [
        f"<!doctype html><html lang=en><head><meta charset=utf-8><title>{html.escape(title)}</title>",
        f"<style>{STYLE}</style><script>{IMAGE_CHECK}</script></head><body>",
        f"<h1>{html.escape(title)}</h1><p>{html.escape(data['run'])}</p>",
        _contents(bool(data["dedup"]), bool(data["languages"]), bool(data["scores"]), bool(data["contamination"])),
        "<h2 id=funnel>Funnel</h2>",
        _table(
            ["step", "documents", "words", *(["tokens"] if with_tokens else [])],
            [[row["step"], row["documents"], *(_blank(row[unit]) for unit in units)] for row in data["funnel"]],
        ),
        f"<p>{html.escape(TOKENS_NOTE)}.</p>" if with_tokens else "",
        _languages_html(data["languages"]),
        _scores_html(data["scores"], with_tokens),
        _contamination_html(data["contamination"]),
        "<h2 id=rules>Rules: what each drops</h2><p>alone: documents failing the rule, whatever else they fail;"
        " exclusively: failing no other rule; first: dropped by it first, in the job's order"
        + (
            "; before extraction: pages the rule dropped before they were extracted (no text, so no words)"
            if early
            else ""
        )
        + ".</p>",
        _table(
            [
                "rule",
                *(["before extraction"] if early else []),
                "documents",
                *units,
                "exclusively",
                *(f"{unit} (exclusively)" for unit in units),
                "first",
            ],
            [
                [
                    r["rule"],
                    *([r["before_extraction"]] if early else []),
                    r["documents"],
                    *(r[u] for u in units),
                    r["exclusive_documents"],
                    *(r["exclusive"][u] for u in units),
                    r["dropped_first"],
                ]
                for r in data["rules"]
            ],  # fmt: skip
        ),
        "<h2 id=overlap>Overlap between rules</h2><p>documents failing both: the rules of the columns are numbered as"
        " the rows.</p><div class=wide>",
        _table(
            ["", *(str(k) for k in range(1, len(overlap["rules"]) + 1))],
            [
                [f"{k} {rule}", *row]
                for k, (rule, row) in enumerate(zip(overlap["rules"], overlap["matrix"], strict=True), 1)
            ],
        ),
        "</div>",
    ]
    if data["dedup"]:
        steps = [[step, documents] for step, documents in data["dedup"].items()]
        parts.append("<h2 id=dedup>Dedup</h2>" + _table(["step", "documents"], steps))
    parts.append(
        "<h2 id=signals>Signals</h2><p>every document, counts on a log scale; the red line is the threshold and the "
        "shade the side it drops; a red bar is the value a true/false threshold drops.</p><div class=figures>"
    )
    parts += [f'<img alt="{html.escape(reason)}" src="data:image/png;base64,{png}">' for reason, png in figures.items()]
    parts.append("</div><h2 id=dropped>Dropped documents, a sample per rule</h2>")
    for rule, documents in data["samples"].items():
        parts.append(f"<h3 id='{html.escape(rule)}'>{html.escape(rule)}</h3>{_documents_html(documents)}")
    parts.append("<h2 id=near>Kept documents nearest each threshold</h2>")
    for reason, documents in data["near_threshold"].items():
        parts.append(f"<h3>{html.escape(reason)} = {data['thresholds'][reason]}</h3>{_documents_html(documents)}")
    parts.append("<h2 id=domains>Domains by documents dropped</h2>")
    parts.append(
        _table(
            ["domain", "dropped", "documents"], [[d["domain"], d["dropped"], d["documents"]] for d in data["domains"]]
        )
    )
    parts.append("</body></html>")
    return "".join(parts)
