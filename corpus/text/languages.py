"""Language keys as FineWeb-2 writes them (`cmn_Hani`): ISO 639-3 code and ISO 15924 script.

A key comes from the language-ID label and the script the text is mostly in. GlotLID (what FineWeb-2 ran) labels
documents with keys already; fastText lid.176 (the default) labels them with ISO 639-1 codes or, where a language
has none, ISO 639-3 and Wikipedia codes, which `LID176_CODES` turns into the individual language FineWeb-2
configured: a macrolanguage becomes the member FineWeb-2 keyed it by (`zh` Chinese -> `cmn` Mandarin, `ar` ->
`arb` Standard Arabic, `ms` -> `zsm`), and lid.176's Wikipedia codes their ISO 639-3 language (`als` Alemannic ->
`gsw`, `bh` Bihari -> `bho`). English (`eng`) and Serbo-Croatian (`hbs`) have no FineWeb-2 config.
"""

from __future__ import annotations

from corpus.text.scripts import NO_SCRIPT

# lid.176 label:ISO 639-3 code, for the 176 labels of lid.176.ftz in alphabetical order.
_LID176 = """
    af:afr als:gsw am:amh an:arg ar:arb arz:arz as:asm ast:ast av:ava az:azj azb:azb ba:bak bar:bar bcl:bcl be:bel
    bg:bul bh:bho bn:ben bo:bod bpy:bpy br:bre bs:bos bxr:bxr ca:cat cbk:cbk ce:che ceb:ceb ckb:ckb co:cos cs:ces
    cv:chv cy:cym da:dan de:deu diq:diq dsb:dsb dty:dty dv:div el:ell eml:eml en:eng eo:epo es:spa et:ekk eu:eus
    fa:fas fi:fin fr:fra frr:frr fy:fry ga:gle gd:gla gl:glg gn:gug gom:gom gu:guj gv:glv he:heb hi:hin hif:hif
    hr:hrv hsb:hsb ht:hat hu:hun hy:hye ia:ina id:ind ie:ile ilo:ilo io:ido is:isl it:ita ja:jpn jbo:jbo jv:jav
    ka:kat kk:kaz km:khm kn:kan ko:kor krc:krc ku:kmr kv:kpv kw:cor ky:kir la:lat lb:ltz lez:lez li:lim lmo:lmo
    lo:lao lrc:lrc lt:lit lv:lvs mai:mai mg:plt mhr:mhr min:min mk:mkd ml:mal mn:khk mr:mar mrj:mrj ms:zsm mt:mlt
    mwl:mwl my:mya myv:myv mzn:mzn nah:nah nap:nap nds:nds ne:npi new:new nl:nld nn:nno no:nob oc:oci or:ory os:oss
    pa:pan pam:pam pfl:pfl pl:pol pms:pms pnb:pnb ps:pbt pt:por qu:quy rm:roh ro:ron ru:rus rue:rue sa:san sah:sah
    sc:srd scn:scn sco:sco sd:snd sh:hbs si:sin sk:slk sl:slv so:som sq:als sr:srp su:sun sv:swe sw:swh ta:tam
    te:tel tg:tgk th:tha tk:tuk tl:fil tr:tur tt:tat tyv:tyv ug:uig uk:ukr ur:urd uz:uzn vec:vec vep:vep vi:vie
    vls:vls vo:vol wa:wln war:war wuu:wuu xal:xal xmf:xmf yi:ydd yo:yor yue:yue zh:cmn
"""
LID176_CODES = dict(pair.split(":") for pair in _LID176.split())

# The script a language is keyed by whatever its letters: kanji-only Japanese is still `jpn_Jpan`.
FIXED_SCRIPT = {"jpn": "Jpan", "kor": "Hang"}


def language_key(label: str | None, script: str) -> str | None:
    """FineWeb-2's key for a document labelled `label` whose letters are mostly in `script`; None without a label.

    A label with a script (`srp_Cyrl`, GlotLID's) is the key; any other label takes the text's script."""
    if not label:
        return None
    if "_" in label:
        return label
    code = LID176_CODES.get(label, label)
    if code in FIXED_SCRIPT and script != NO_SCRIPT:
        script = FIXED_SCRIPT[code]
    return f"{code}_{script}"
