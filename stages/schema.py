"""The Arrow schemas that flow between stages and land in Parquet.

`RECORDS` is what the read stage hands to extraction: one row per WARC response (or WET conversion) record
that carries a page. `DOCUMENTS` is what the pipeline stores: one row per extracted document. Rule signals are
added later as extra columns after these; the columns named here always come first, in this order.
"""

import pyarrow as pa

RECORD_FIELDS = [
    pa.field("id", pa.string(), nullable=False, metadata={"doc": "WARC-Record-ID without the <>"}),
    pa.field("url", pa.string(), metadata={"doc": "WARC-Target-URI, <...> wrappers removed"}),
    pa.field("domain", pa.string(), metadata={"doc": "lower-case host of url, no port, no leading www."}),
    pa.field("date", pa.timestamp("ms", tz="UTC"), metadata={"doc": "WARC-Date; null when unparseable"}),
    pa.field("source", pa.string(), nullable=False, metadata={"doc": "input file path or URL"}),
    pa.field("offset", pa.int64(), nullable=False, metadata={"doc": "byte offset of the record in source"}),
    pa.field("digest", pa.string(), metadata={"doc": "WARC-Payload-Digest, or sha1:BASE32 computed here"}),
]

RECORDS = pa.schema(
    [
        *RECORD_FIELDS,
        pa.field("kind", pa.string(), nullable=False, metadata={"doc": "'html' (response) or 'text' (WET)"}),
        pa.field("http_charset", pa.string(), metadata={"doc": "charset from the HTTP Content-Type"}),
        pa.field("payload", pa.large_binary(), nullable=False, metadata={"doc": "HTTP body, content-decoded"}),
    ]
)

DOCUMENTS = pa.schema(
    [
        *RECORD_FIELDS,
        pa.field("charset", pa.string(), metadata={"doc": "encoding the page was decoded with"}),
        pa.field("text", pa.large_string(), nullable=False, metadata={"doc": "extracted main text"}),
        pa.field("lang", pa.string(), metadata={"doc": "ISO 639 code from fastText lid.176"}),
        pa.field("lang_score", pa.float32(), metadata={"doc": "probability of lang"}),
    ]
)

# Where a page dropped before extraction is (no text: it was never extracted), as the run keeps it to be read.
PAGE_PLACE_FIELDS = [DOCUMENTS.field(name) for name in ("id", "url", "source", "offset")]
