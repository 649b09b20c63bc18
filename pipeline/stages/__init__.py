"""The corpus build's stages, one module each, each a small named Beam transform (`build_corpus.py`
wires them, top to bottom; curation, between 2 and 3, is `pipeline/curation/`):

  1 ReadDocuments        files (or a tfds split) -> normalised documents (or keys and where each
                         document is: `Pointer`), per-file stats                      read.py
  2 DeduplicateDocuments documents -> (content key, document or pointer), exact copies counted;
    RereadDocuments      the files again -> (key, text) of the documents kept       dedup.py, read.py
  3 TrainVocab           keyed documents -> a VocabFile from a seeded sample         train_vocab.py
  4 BatchDocuments       (key, pointer or text) -> batches of files (or tfds documents), about a
                         packing group each, small files together                    groups.py
    CutGroups            a batch read again, tokenized (`DocumentTokenizer`:
                         sentences encoded once, a segmenter's masking units) and cut
                         into packing groups as it is read: (split, group, docs)     groups.py, tokenize.py
  5 CreateInstances      (split, group, docs) -> one part file of the group's records in key
                         order, and stats                                            create_instances.py
  6 WriteShards          every part's key range -> one TFRecord per shard, written under _tmp/
                         and renamed; shard counts from the records written          write_shards.py
  7 WriteManifest        shards, stats, vocab -> manifest.json, written last         manifest.py

In the in-process runner, instance creation and shard merges work beside the stage that feeds
them, on threads of their own (`beside.py`).

Stats travel as `Counter`s on a "stats" output and are summed once (`stats.SumCounters`); each is
also a Beam counter in the `bertbeam` namespace, so a Dataflow job shows them as it runs. Progress
lines a person reads during the build: `progress.py`.
"""
