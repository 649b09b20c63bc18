"""`python -m pipeline.curation_report OUTPUT`: what curation removed from a built corpus. The
command's home is `pipeline/curation/report.py`; this module keeps its documented name."""

import sys

from pipeline.curation.report import main

if __name__ == "__main__":
    sys.exit(main())
