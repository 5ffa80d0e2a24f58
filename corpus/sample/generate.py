"""The embedded sample crawl: a small, deterministic WARC written by this module.

It imitates what a real crawl throws at the pipeline, in a few hundred pages: articles (assembled from the
sentence banks below, written for this project), boilerplate-heavy pages, exact and near copies of articles,
keyword spam, pages in other languages and legacy charsets (cp1251, Shift_JIS, declared only in <meta>),
gzip-encoded bodies, and the records a crawl also holds (requests, metadata, images, redirects, 404s).

`write_sample_warc(path)` always writes the same bytes (seeded choices, fixed dates, gzip mtime 0), so the
committed `corpus/sample/data/sample.warc.gz` can be checked against a fresh build.
"""

from __future__ import annotations

import gzip
import html
import random
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

SAMPLE_PATH = Path(__file__).parent / "data" / "sample.warc.gz"
SAMPLE_TOKENIZER = Path(__file__).parent / "data" / "tokenizer.json"
SAMPLE_VOCABULARY = 2_000
SEED = 20261202
CRAWL_START = datetime(2026, 11, 1, tzinfo=UTC)

TOPICS = {
    "gardening": [
        "Tomatoes grow best when the soil stays evenly moist, so water deeply twice a week rather than a little every day.",
        "A layer of straw mulch keeps the roots cool in July and stops the lower leaves from catching blight off wet soil.",
        "Most gardeners in cooler regions start their seeds indoors about six weeks before the last expected frost.",
        "Crop rotation matters more than any fertiliser: never plant tomatoes where potatoes grew the year before.",
        "Pinching out the side shoots of cordon varieties sends the plant's energy into fewer, larger fruits.",
        "Compost that smells sour has too little air in it; turn the heap and add dry leaves or shredded cardboard.",
        "Beans and peas fix nitrogen from the air, which is why old growers follow them with hungry brassicas.",
        "Slugs do most of their damage on mild, damp nights, and a torchlit walk round the beds finds the worst of them.",
        "Raised beds warm up earlier in spring, drain faster after rain and spare the gardener's back.",
        "Saving seed from open-pollinated varieties lets a garden adapt, year by year, to its own soil and weather.",
        "Rainwater collected from a shed roof is softer than tap water and the plants seem to prefer it.",
        "The first frost usually arrives without warning, so keep a roll of fleece by the door from October onward.",
    ],
    "cycling": [
        "The new bridge gives cyclists a direct route across the river for the first time since the old ferry closed.",
        "Commuters who switched to bicycles during the rail strike say many of them never went back to the train.",
        "A properly inflated tyre rolls faster, punctures less often and wears more evenly than a soft one.",
        "The council counted nearly four thousand bicycle trips a day on the harbour path last September.",
        "Chains last longer when they are wiped and lightly oiled every few hundred kilometres, not drenched once a year.",
        "Protected lanes, separated from traffic by a kerb, make parents far more willing to let children ride to school.",
        "Winter riding is mostly a matter of lights, mudguards and a jacket that keeps the wind out.",
        "The club's Sunday ride leaves the square at eight and stops for coffee halfway, whatever the weather.",
        "Electric bicycles have brought riders back to hilly towns where climbing used to put most people off.",
        "Route planners now weigh the gradient as well as the distance, which changes the suggested path surprisingly often.",
        "Bike theft falls sharply where there are secure racks in busy, well-lit places.",
        "The mechanic showed how to true a wheel by tightening spokes a quarter turn at a time.",
    ],
    "astronomy": [
        "Jupiter rises in the east shortly after sunset this month and outshines every star in the evening sky.",
        "Through a small telescope the four largest moons of Jupiter look like a row of faint stars beside the planet.",
        "The Perseid meteor shower peaks in the middle of August, when the Earth passes through the debris of a comet.",
        "Light pollution hides all but the brightest stars from most city dwellers, and the problem grows every year.",
        "A pair of ordinary binoculars reveals craters on the Moon and the crowded star fields of the Milky Way.",
        "Astronomers measure the distance to nearby stars by the tiny shift in their position as the Earth orbits the Sun.",
        "The observatory opens its dome to the public on the first clear Friday of each month.",
        "Saturn's rings are tilted almost edge-on to us this year, so they appear as a thin bright line.",
        "Variable stars change in brightness, and amateur observers still contribute useful measurements of them.",
        "The best nights for observing are often the coldest, when the air is dry and steady.",
        "A red torch keeps the eyes adapted to the dark while reading a star chart.",
        "Comets brighten as they approach the Sun and their ices turn to gas, forming the familiar tail.",
    ],
    "cooking": [
        "Bread dough is ready when a gentle poke leaves a dent that springs back slowly rather than at once.",
        "Salting aubergine slices for half an hour draws out water and keeps them from soaking up oil in the pan.",
        "A stock simmered for hours with roasted bones has a depth of flavour that no cube can match.",
        "Resting meat after roasting lets the juices settle, so less of them run out onto the board.",
        "Toasting spices in a dry pan for a minute releases oils that make a curry smell of something.",
        "The secret of a crisp pastry base is a hot oven shelf and a filling that is not too wet.",
        "Fresh pasta needs only flour and eggs, but the dough must rest before it will roll thin.",
        "Onions cooked slowly for forty minutes turn sweet and golden, which no amount of heat can hurry.",
        "A squeeze of lemon at the end brightens a soup that tastes flat, more often than extra salt does.",
        "Rice cooked by the absorption method keeps its grains separate if the lid stays on until the end.",
        "Leftover bread makes good crumbs, croutons or a summer salad with ripe tomatoes.",
        "Sharp knives are safer than blunt ones because they do not slip off the skin of a tomato.",
    ],
    "history": [
        "The town's charter was granted in 1284, and the market has been held on the same square ever since.",
        "Records from the parish show that the bridge was rebuilt in stone after a flood carried away the timber one.",
        "Letters kept in the county archive describe the hard winter of 1740, when the river froze for six weeks.",
        "The mill employed more than two hundred people at its height, most of them women and children.",
        "When the railway arrived in 1852, the canal lost most of its trade within a decade.",
        "Archaeologists found the foundations of a Roman villa beneath the school playing field.",
        "The old guildhall served as a court, a school and a warehouse before it became the museum.",
        "Maps from the eighteenth century show orchards where the housing estate now stands.",
        "During the war the manor house was used as a hospital for convalescent soldiers.",
        "The museum's collection of farm tools shows how little some of them changed in three centuries.",
        "A local historian has transcribed the diaries of a shopkeeper who wrote every day for forty years.",
        "The last working forge in the valley closed in 1961, and its anvil now stands outside the library.",
    ],
    "software": [
        "A good test fails for exactly one reason, and its name tells you what that reason is.",
        "Profiling before optimising saves days: the slow part of a program is rarely where you expect it to be.",
        "Writing files to a temporary name and renaming them makes a half-finished write invisible to readers.",
        "Code review catches fewer bugs than people hope, but it spreads knowledge of the code through the team.",
        "Columnar formats such as Parquet let a query read only the columns it needs, which is often a small share.",
        "A job that can be killed at any moment and resumed without harm is much easier to run on shared machines.",
        "Logging counts of what was kept and what was dropped turns a silent filter into one you can argue about.",
        "Small pure functions are easy to test, and a pipeline made of them is easy to change.",
        "Dependency versions should be pinned to ranges, so that a fresh install a year later still works.",
        "Most outages begin with a change that everyone agreed was too small to need a test.",
        "A benchmark that does not run the alternative in the same process on the same data proves very little.",
        "Error messages should name the file, the record and the field, and say what the user can do next.",
    ],
}

OTHER_LANGUAGES = {
    "fr": [
        "Le marché du samedi attire chaque semaine des producteurs venus de toute la vallée.",
        "La municipalité a décidé de rénover la bibliothèque et d'agrandir la salle de lecture pour les enfants.",
        "Les randonneurs sont invités à rester sur les sentiers balisés pendant la période de nidification.",
        "Le festival de musique se tiendra cette année dans le parc, au bord de la rivière.",
        "Les habitants du quartier se sont réunis pour planter des arbres le long de l'avenue principale.",
        "La boulangerie du village ouvre à six heures et ferme le lundi.",
    ],
    "de": [
        "Der Wochenmarkt findet jeden Samstag auf dem Platz vor dem Rathaus statt.",
        "Die neue Radbrücke verbindet die beiden Stadtteile und verkürzt den Schulweg vieler Kinder.",
        "Im Herbst sammeln die Schüler Äpfel von den alten Bäumen auf der Streuobstwiese.",
        "Die Bibliothek bleibt wegen Umbauarbeiten bis zum Ende des Monats geschlossen.",
        "Das Museum zeigt eine Ausstellung über die Geschichte der Eisenbahn in der Region.",
        "Bei klarem Himmel kann man von der Sternwarte aus die Ringe des Saturn beobachten.",
    ],
    "es": [
        "El mercado del sábado reúne a los agricultores de los pueblos cercanos desde hace décadas.",
        "La biblioteca municipal amplía su horario durante la temporada de exámenes.",
        "Los vecinos organizaron una jornada para limpiar la playa antes del verano.",
        "El nuevo carril para bicicletas une la estación con el centro de la ciudad.",
        "La receta tradicional lleva tomate, ajo, aceite de oliva y pan del día anterior.",
        "El observatorio abre sus puertas al público el primer viernes de cada mes.",
    ],
    "it": [
        "Il mercato del sabato si tiene nella piazza principale fin dal medioevo.",
        "La biblioteca comunale organizza letture per bambini ogni mercoledì pomeriggio.",
        "Il nuovo ponte ciclabile collega i due quartieri separati dal fiume.",
        "La ricetta della nonna prevede pomodori maturi, basilico fresco e un filo d'olio.",
        "Gli archeologi hanno trovato i resti di una villa romana sotto il campo sportivo.",
        "Il museo della città espone attrezzi agricoli di tre secoli fa.",
    ],
    "nl": [
        "De zaterdagmarkt op het plein trekt elke week bezoekers uit de hele regio.",
        "Het nieuwe fietspad langs het kanaal is veiliger voor scholieren.",
        "De bibliotheek blijft tijdens de verbouwing open in een tijdelijk gebouw.",
        "In de herfst plukken vrijwilligers appels in de oude boomgaard.",
        "Het museum toont een tentoonstelling over de geschiedenis van de haven.",
        "Bij helder weer is de sterrenwacht op vrijdagavond open voor publiek.",
    ],
    "ru": [
        "Субботний рынок на центральной площади работает с раннего утра до обеда.",
        "Городская библиотека продлила часы работы на время экзаменов.",
        "Новый мост через реку соединил два района города.",
        "Археологи нашли остатки древнего поселения на окраине деревни.",
        "В музее открылась выставка старинных сельскохозяйственных инструментов.",
        "Зимой река замерзает, и жители катаются на коньках прямо у набережной.",
    ],
    "ja": [
        "土曜日の朝市には、近くの村から多くの農家が野菜を持ってきます。",
        "市立図書館は試験期間中、開館時間を延長しています。",
        "川に架かる新しい橋は、二つの地区を結んでいます。",
        "秋になると、子どもたちは古い果樹園でりんごを拾います。",
        "博物館では、三百年前の農具の展示が行われています。",
        "晴れた夜には、天文台から土星の輪を見ることができます。",
    ],
    "zh": [
        "每个星期六早上，附近村庄的农民都会把新鲜蔬菜带到集市上。",
        "市图书馆在考试期间延长了开放时间。",
        "这座新桥把河两岸的两个城区连接了起来。",
        "考古学家在学校操场下面发现了一座古代庄园的地基。",
        "博物馆正在展出三百年前的农具。",
        "天气晴朗的夜晚，可以在天文台看到土星的光环。",
    ],
}

# Legacy encodings a crawler meets; the charset is declared only in <meta>, never in the HTTP header.
LEGACY_CHARSETS = {"ru": "cp1251", "ja": "shift_jis", "zh": "gbk"}

SPAM_WORDS = ["cheap", "casino", "bonus", "free", "pills", "loans", "win", "best", "online", "deal", "discount"]
NAV_LINKS = ["Home", "News", "Sport", "Weather", "Shop", "Contact", "About us", "Login", "Register", "Newsletter"]
FOOTER = [
    "Copyright 2026. All rights reserved.",
    "This site uses cookies to improve your experience. By continuing you accept our cookie policy.",
    "Privacy policy | Terms of use | Accessibility | Sitemap",
    "Follow us on social media for the latest updates.",
]


def _page(title: str, body_html: str, lang: str, charset: str = "utf-8", nav: bool = True) -> str:
    navigation = (
        "<nav><ul>" + "".join(f'<li><a href="/{n.lower()}">{n}</a></li>' for n in NAV_LINKS) + "</ul></nav>"
        if nav
        else ""
    )
    footer = "<footer>" + "".join(f"<p>{html.escape(line)}</p>" for line in FOOTER) + "</footer>"
    return (
        f'<!DOCTYPE html>\n<html lang="{lang}"><head><meta charset="{charset}"><title>{html.escape(title)}</title>'
        f"</head><body><header><h1>Sample site</h1>{navigation}</header>"
        f"<main><article><h2>{html.escape(title)}</h2>{body_html}</article></main>"
        f"<aside><h3>Related</h3><ul><li><a href='/a'>More stories</a></li><li><a href='/b'>Popular</a></li></ul>"
        f"</aside>{footer}</body></html>"
    )


def _paragraphs(sentences: list[str]) -> str:
    chunks = [sentences[i : i + 3] for i in range(0, len(sentences), 3)]
    return "".join(f"<p>{html.escape(' '.join(chunk))}</p>" for chunk in chunks)


class WarcWriter:
    """Writes WARC/1.1 records, one gzip member each, as Common Crawl does."""

    def __init__(self) -> None:
        self.members: list[bytes] = []
        self.pages = 0

    def _record(self, headers: dict[str, str], block: bytes) -> None:
        head = "WARC/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers.items())
        head += f"Content-Length: {len(block)}\r\n\r\n"
        self.members.append(gzip.compress(head.encode() + block + b"\r\n\r\n", mtime=0))

    def _common(self, kind: str, url: str | None, when: datetime, salt: str) -> dict[str, str]:
        record_id = uuid.uuid5(uuid.NAMESPACE_URL, f"{kind}:{url}:{salt}")
        headers = {"WARC-Type": kind, "WARC-Record-ID": f"<urn:uuid:{record_id}>"}
        headers["WARC-Date"] = when.strftime("%Y-%m-%dT%H:%M:%SZ")
        if url:
            headers["WARC-Target-URI"] = url
        return headers

    def warcinfo(self) -> None:
        body = b"software: corpus sample generator\r\nformat: WARC File Format 1.1\r\n"
        headers = self._common("warcinfo", None, CRAWL_START, "info")
        headers["Content-Type"] = "application/warc-fields"
        self._record(headers, body)

    def exchange(
        self,
        url: str,
        when: datetime,
        body: bytes,
        content_type: str,
        status: str = "200 OK",
        extra_http: str = "",
    ) -> None:
        request = f"GET {url.split('/', 3)[-1]} HTTP/1.1\r\nHost: {url.split('/')[2]}\r\n\r\n".encode()
        req_headers = self._common("request", url, when, "request")
        req_headers["Content-Type"] = "application/http; msgtype=request"
        self._record(req_headers, request)
        http_head = (
            f"HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\n{extra_http}Content-Length: {len(body)}\r\n\r\n"
        )
        resp_headers = self._common("response", url, when, "response")
        resp_headers["Content-Type"] = "application/http; msgtype=response"
        self._record(resp_headers, http_head.encode() + body)
        meta_headers = self._common("metadata", url, when, "metadata")
        meta_headers["Content-Type"] = "application/warc-fields"
        self._record(meta_headers, f"fetchTimeMs: {len(body) % 997}\r\n".encode())
        if "html" in content_type:
            self.pages += 1

    def html_page(self, url: str, when: datetime, page: str, charset: str = "utf-8", header_charset: bool = True):
        content_type = f"text/html; charset={charset}" if header_charset else "text/html"
        self.exchange(url, when, page.encode(charset), content_type)


def build_sample() -> tuple[bytes, int]:
    """The sample WARC's bytes and its number of HTML response records."""
    rng = random.Random(SEED)
    warc = WarcWriter()
    warc.warcinfo()
    clock = iter(CRAWL_START + timedelta(minutes=7 * i) for i in range(100_000))
    articles: list[tuple[str, str, list[str]]] = []

    # Articles: 6-11 sentences of one topic, in a seeded order.
    for topic, bank in TOPICS.items():
        for n in range(22):
            sentences = rng.sample(bank, rng.randint(6, 11))
            title = f"{topic.title()} notes, part {n + 1}"
            url = f"https://{topic}.example.org/{2026 - n % 5}/{topic}-notes-{n + 1}.html"
            articles.append((url, title, sentences))
            warc.html_page(url, next(clock), _page(title, _paragraphs(sentences), "en"))

    # Exact copies (syndicated) and near copies (a sentence changed or dropped), on other sites.
    for n, (url, title, sentences) in enumerate(rng.sample(articles, 40)):
        host = f"mirror{n % 4}.example.net"
        copy = list(sentences)
        if n % 2:
            copy[rng.randrange(len(copy))] = "Updated: this story was corrected after publication."
        if n % 3 == 0:
            copy = copy[:-1]
        warc.html_page(f"http://{host}/{url.rsplit('/', 1)[-1]}", next(clock), _page(title, _paragraphs(copy), "en"))

    # Boilerplate-heavy pages: a line of content inside menus, banners and link lists.
    for n in range(30):
        topic = rng.choice(list(TOPICS))
        links = "".join(f"<li><a href='/tag/{i}'>{rng.choice(NAV_LINKS)} {i}</a></li>" for i in range(25))
        body = f"<p>{html.escape(rng.choice(TOPICS[topic]))}</p><ul class='tags'>{links}</ul>"
        warc.html_page(
            f"https://portal{n % 5}.example.com/{topic}/index-{n}.html", next(clock), _page("Index", body, "en")
        )

    # Keyword spam.
    for n in range(25):
        words = [rng.choice(SPAM_WORDS) for _ in range(rng.randint(80, 200))]
        body = "".join(f"<p>{' '.join(words[i : i + 12])}</p>" for i in range(0, len(words), 12))
        warc.html_page(
            f"http://best-deals-{n % 7}.example.biz/offer{n}.php", next(clock), _page("Best deals", body, "en")
        )

    # Other languages; three in legacy charsets declared only in <meta>.
    for lang, bank in OTHER_LANGUAGES.items():
        charset = LEGACY_CHARSETS.get(lang, "utf-8")
        for n in range(6):
            page = _page(f"{lang} {n + 1}", _paragraphs(rng.sample(bank, 5)), lang, charset=charset)
            warc.html_page(
                f"https://news.example.{lang}/article/{n + 1}", next(clock), page, charset, header_charset=False
            )

    # gzip-encoded bodies, as a server sent them.
    for n, (_, title, sentences) in enumerate(articles[:5]):
        body = gzip.compress(_page(title, _paragraphs(sentences), "en").encode(), mtime=0)
        warc.exchange(
            f"https://gzip.example.org/{n}",
            next(clock),
            body,
            "text/html; charset=utf-8",
            extra_http="Content-Encoding: gzip\r\n",
        )

    # What else a crawl holds: images, a redirect, a 404 page, robots.txt.
    for n in range(10):
        warc.exchange(
            f"https://images.example.org/{n}.png",
            next(clock),
            bytes(rng.randrange(256) for _ in range(64)),
            "image/png",
        )
    warc.exchange(
        "https://gardening.example.org/old",
        next(clock),
        b"",
        "text/html",
        status="301 Moved Permanently",
        extra_http="Location: https://gardening.example.org/2026/gardening-notes-1.html\r\n",
    )
    warc.exchange(
        "https://cycling.example.org/missing",
        next(clock),
        b"<html><body></body></html>",
        "text/html",
        status="404 Not Found",
    )
    warc.exchange("https://astronomy.example.org/robots.txt", next(clock), b"User-agent: *\nDisallow:\n", "text/plain")
    return b"".join(warc.members), warc.pages


def write_sample_tokenizer(path: str | Path = SAMPLE_TOKENIZER) -> None:
    """The sample job's tokenizer: byte-level BPE of `SAMPLE_VOCABULARY` tokens trained on the sentences the pages
    are made of (every language), so the sample goes all the way to token shards with nothing downloaded."""
    from corpus.stages.tokenize import train_tokenizer

    texts = [sentence for bank in TOPICS.values() for sentence in bank]
    texts += [sentence for bank in OTHER_LANGUAGES.values() for sentence in bank] + NAV_LINKS + FOOTER
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    train_tokenizer(texts, SAMPLE_VOCABULARY, str(path))


def write_sample_warc(path: str | Path = SAMPLE_PATH) -> int:
    data, pages = build_sample()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_bytes(data)
    return pages
