"""LlamaGen t2i's caption cleaning, as its training applied it before FLAN-T5.

LlamaGen's ``language/t5.py`` (after PixArt and DeepFloyd IF) runs ``clean_caption`` twice on every
caption, when extracting the training features and when sampling: URL-decode, lowercase, drop URLs,
HTML, handles, CJK, ids, file names and shop phrases, unify dashes and quotes, fix the text with ftfy,
squeeze spaces. The steps are restated here as tables of substitutions in the same order. HTML is
reduced to its text with the standard library's parser (the parser behind BeautifulSoup's
``html.parser``, which the original calls).
"""

from __future__ import annotations

import html
import re
from html.entities import html5
from html.parser import HTMLParser
from urllib.parse import unquote_plus

from ...core.errors import ConfigError

URL = (
    r"\b((?:{scheme}:(?:\/{{1,3}}|[a-zA-Z0-9%])|[a-zA-Z0-9.\-]+[.](?:com|co|ru|net|org|edu|gov|it)"
    r"[\w/-]*\b\/?(?!@)))"
)
FILE_TYPES = "png|jpg|jpeg|bmp|webp|eps|pdf|apk|mp4"

BEFORE_HTML = [("<person>", "person"), (URL.format(scheme="https?"), ""), (URL.format(scheme="www"), "")]

AFTER_HTML = [
    (r"@[\w\d]+\b", ""),  # @handles
    (r"[\u31c0-\u9fff]+", ""),  # CJK strokes .. unified ideographs
    (
        r"[\u002D\u058A\u05BE\u1400\u1806\u2010-\u2015\u2E17\u2E1A\u2E3A\u2E3B\u2E40\u301C\u3030\u30A0"
        r"\uFE31\uFE32\uFE58\uFE63\uFF0D]+",
        "-",
    ),  # every dash
    (r"[`´«»“”¨]", '"'),
    (r"[‘’]", "'"),
    (r"&quot;?", ""),
    (r"&amp", ""),
    (r"\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3}", " "),  # IP addresses
    (r"\d:\d\d\s+$", ""),  # article ids
    (r"\\n", " "),  # a literal backslash-n
    (r"#\d{1,3}\b", ""),
    (r"#\d{5,}\b", ""),
    (r"\b\d{6,}\b", ""),
    (rf"[\S]+\.(?:{FILE_TYPES})", ""),  # file names
    (r"[\"\']{2,}", '"'),
    (r"[\.]{2,}", " "),
    (r"[#®•©™&@·º½¾¿¡§~\)\(\]\[\}\{\|\\\/\*]{1,}", " "),  # runs of stray punctuation
    (r"\s+\.\s+", " "),
]

AFTER_FIX = [
    (r"\b[a-zA-Z]{1,3}\d{3,15}\b", ""),
    (r"\b[a-zA-Z]+\d+[a-zA-Z]+\b", ""),
    (r"\b\d+[a-zA-Z]+\d+\b", ""),
    (r"(worldwide\s+)?(free\s+)?shipping", ""),
    (r"(free\s)?download(\sfree)?", ""),
    (r"\bclick\b\s(?:for|on)\s\w+", ""),
    (rf"\b(?:{FILE_TYPES})(\simage[s]?)?", ""),
    (r"\bpage\s+\d+\b", ""),
    (r"\b\d*[a-zA-Z]+\d+[a-zA-Z]+\d+[a-zA-Z\d]*\b", " "),
    (r"\b\d+\.?\d*[xх×]\d+\.?\d*\b", ""),  # sizes like 1920x1080
    (r"\b\s+\:\s+", ": "),
    (r"(\D[,\./])\b", r"\1 "),
    (r"\s+", " "),
    (r"^[\"\']([\w\W]+)[\"\']$", r"\1"),
    (r"^[\'\_,\-\:;]", ""),
    (r"[\'\_,\-\:\-\+]$", ""),
    (r"^\.\S+$", ""),
]


class _TextOnly(HTMLParser):
    """The text BeautifulSoup's ``.text`` gives: data, CDATA and character references (an unknown
    entity stays as ``&name``), but not the contents of script, style and template elements,
    comments, declarations or processing instructions."""

    HIDDEN = {"script", "style", "template"}

    def __init__(self):
        super().__init__(convert_charrefs=False)
        self.parts: list[str] = []
        self.hidden = 0

    def handle_starttag(self, tag, attrs) -> None:
        self.hidden += tag in self.HIDDEN

    def handle_endtag(self, tag) -> None:
        self.hidden -= tag in self.HIDDEN and self.hidden > 0

    def handle_data(self, data: str) -> None:
        if not self.hidden:
            self.parts.append(data)

    def handle_entityref(self, name: str) -> None:
        self.handle_data(html5.get(f"{name};", f"&{name}"))

    def handle_charref(self, name: str) -> None:
        self.handle_data(html.unescape(f"&#{name};"))

    def unknown_decl(self, data: str) -> None:
        if data.startswith("CDATA["):
            self.handle_data(data[len("CDATA[") :])


def html_text(text: str) -> str:
    parser = _TextOnly()
    parser.feed(text)
    parser.close()
    return "".join(parser.parts)


def substitute(text: str, table: list[tuple[str, str]]) -> str:
    for pattern, replacement in table:
        text = re.sub(pattern, replacement, text)
    return text


def clean_caption(text: str) -> str:
    """One pass of the cleaning (LlamaGen applies two: :func:`llamagen_caption`)."""
    try:
        from ftfy import fix_text
    except ImportError:
        raise ConfigError(
            'LlamaGen t2i cleans captions with ftfy, as its training did: pip install -e ".[families]"'
        ) from None
    text = substitute(unquote_plus(str(text)).strip().lower(), BEFORE_HTML)
    text = substitute(html_text(text), AFTER_HTML)
    if len(re.findall(r"[-_]", text)) > 3:  # this-is-a-slug / this_is_a_slug
        text = re.sub(r"[-_]", " ", text)
    text = html.unescape(html.unescape(fix_text(text))).strip()
    return substitute(text, AFTER_FIX).strip()


def llamagen_caption(text: str) -> str:
    """The caption LlamaGen's T5Embedder feeds FLAN-T5: ``clean_caption`` applied twice."""
    return clean_caption(clean_caption(text))
