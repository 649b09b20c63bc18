"""Curation: which documents leave the corpus, and why, between deduplication and tokenizing. Each
kind of rule's arithmetic lives beside its Beam step, as datatrove's `filters/` and `dedup/`:

  language.py, quality.py   -> filter_documents.py   language id (CLD2); Gopher's and C4's rules
  rules.py                  -> filter_documents.py   both, deciding one document (picklable, for workers)
  tokens.py                 -> quality.py            the rules' tokens as arrays (hashes, lengths, flags)
  minhash.py                -> near_dedup.py         MinHash LSH near-duplicates
  curate.py                 the stages in order, and the documents they keep
  removal.py                why a document was removed (what the manifest counts)
  samples.py                a seeded sample of the removed documents, for review
  report.py                 `python -m pipeline.curation_report OUTPUT`: what was removed
"""
