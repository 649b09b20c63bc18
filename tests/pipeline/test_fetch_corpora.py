"""The general-text fetchers' cleaning, on markup like the dumps' own (the downloads themselves run
in the benchmark and `make data`)."""

from pipeline.fetch_corpora import wiki_pages, wiki_text

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
