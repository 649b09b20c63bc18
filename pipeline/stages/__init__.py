"""The corpus build's stages, one module each, each a small named Beam transform (`build_corpus.py`
wires them, top to bottom):

  1 ReadDocuments        files (or a tfds split) -> normalised documents (or keys and where each
                         document is: (file, index)), per-file stats
  2 DeduplicateDocuments documents -> (content key, document or pointer), exact copies counted;
    RereadDocuments      the files again -> (key, text) of the documents kept
  3 TrainVocab           keyed documents -> a sentencepiece VocabFile from a seeded sample
  4 TokenizeDocuments    batches of (key, document) -> (split, TokenizedDoc): sentences split and
                         encoded once, with a segmenter's masking units; spilled to files, a
                         `SpilledDoc` pointer going on
  5 make_plan            token totals -> packing groups and shard counts per split
  6 CreateInstances      (split, TokenizedDoc) -> sorted part files per shard, and stats
  7 WriteShards          part files -> one TFRecord per shard, written under _tmp/ and renamed
  8 write_manifest       shards, stats, vocab, plan -> manifest.json, written last

Stats travel as `Counter`s on a "stats" output and are summed once (`SumCounters`); each is also a
Beam counter in the `bertbeam` namespace, so a Dataflow job shows them as it runs.
"""

from pipeline.stages.common import BadInputError, Removal, SumCounters, is_dry_run
from pipeline.stages.create_instances import CreateInstances
from pipeline.stages.curate import CURATION_DIR, CurateDocuments, DropRemoved, SampleRemoved, write_samples
from pipeline.stages.dedup import DeduplicateDocuments
from pipeline.stages.manifest import WriteManifest, write_manifest
from pipeline.stages.near_dedup import NearDeduplicate
from pipeline.stages.plan import PlanGroups, estimate_instances, make_plan
from pipeline.stages.read import ReadDocuments, ReadFileDocuments, RereadDocuments
from pipeline.stages.tokenize import TokenizeDocuments
from pipeline.stages.train_vocab import TrainVocab, write_vocab
from pipeline.stages.write_shards import WriteShards

__all__ = [
    "CURATION_DIR",
    "CurateDocuments",
    "DropRemoved",
    "NearDeduplicate",
    "Removal",
    "SampleRemoved",
    "write_samples",
    "BadInputError",
    "CreateInstances",
    "DeduplicateDocuments",
    "PlanGroups",
    "ReadDocuments",
    "ReadFileDocuments",
    "RereadDocuments",
    "SumCounters",
    "TokenizeDocuments",
    "TrainVocab",
    "WriteManifest",
    "WriteShards",
    "estimate_instances",
    "is_dry_run",
    "make_plan",
    "write_manifest",
    "write_vocab",
]
