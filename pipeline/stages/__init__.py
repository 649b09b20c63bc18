"""The corpus build's stages, one module each, each a small named Beam transform (`build_corpus.py`
wires them, top to bottom; curation, between 2 and 3, is `pipeline/curation/`):

  1 ReadDocuments        files (or a tfds split) -> normalised documents (or keys and where each
                         document is: (file, index)), per-file stats                  read.py
  2 DeduplicateDocuments documents -> (content key, document or pointer), exact copies counted;
    RereadDocuments      the files again -> (key, text) of the documents kept       dedup.py, read.py
  3 TrainVocab           keyed documents -> a VocabFile from a seeded sample         train_vocab.py
  4 TokenizeDocuments    batches of (key, document) -> (split, TokenizedDoc): sentences split and
                         encoded once, with a segmenter's masking units; spilled to files, a
                         `SpilledDoc` pointer going on                               tokenize.py
  5 PlanGroups           token totals -> packing groups and shard counts per split   plan.py
  6 CreateInstances      (split, TokenizedDoc) -> sorted part files per shard, and stats
                                                                                     create_instances.py
  7 WriteShards          part files -> one TFRecord per shard, written under _tmp/ and renamed
                                                                                     write_shards.py
  8 WriteManifest        shards, stats, vocab, plan -> manifest.json, written last   manifest.py

Stats travel as `Counter`s on a "stats" output and are summed once (`stats.SumCounters`); each is
also a Beam counter in the `bertbeam` namespace, so a Dataflow job shows them as it runs. Progress
lines a person reads during the build: `progress.py`.
"""
