"""`python -m pipeline.fetch_corpora --dest data [NAME ...]`: fetch the corpora and labelled sets
the demo, tests and benches use. The command's home is `pipeline/fetch/corpora.py`; this module
keeps its documented name."""

import sys

from pipeline.fetch.corpora import main

if __name__ == "__main__":
    sys.exit(main())
