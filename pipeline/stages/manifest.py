"""WriteManifest: shards, stats, vocab, plan -> manifest.json, written last."""

from __future__ import annotations

import apache_beam as beam

from pipeline import files, schema
from pipeline.config import CorpusConfig
from pipeline.files import write_atomically
from pipeline.parts import (
    remove_tmp,
)
from pipeline.vocab import KINDS


class WriteManifest(beam.PTransform):
    """Shard descriptions -> manifest.json, once every shard is written (side inputs: the summed
    stats, the vocab's VocabInfo)."""

    def __init__(self, cfg: CorpusConfig, stats, vocab_info, segmenter: dict):
        super().__init__()
        self._cfg = cfg
        self._segmenter = segmenter
        self._inputs = {"stats": stats, "vocab_info": vocab_info}

    def expand(self, shards):
        return (
            shards
            | "CollectShards" >> beam.combiners.ToList()
            | "Write"
            >> beam.FlatMap(write_manifest, cfg=self._cfg, segmenter=self._segmenter, **self._inputs)
        )


def write_manifest(shards, cfg, stats, vocab_info, segmenter):
    """Removes what an earlier build left that this one did not write (shards with other counts,
    the other vocab kind, _tmp/), then writes manifest.json: last, so a folder with a manifest is
    a complete build."""
    manifest = schema.build_manifest(cfg, shards, stats, vocab_info, segmenter)
    current = {s["file"] for s in shards}
    for split in schema.SPLITS:
        for path in files.glob(f"{cfg.output_dir}/{split}-*-of-*.tfrecord"):
            if path.rsplit("/", 1)[-1] not in current:
                files.remove(path)
    for name in set(KINDS.values()) - {vocab_info.file}:
        if files.exists(f"{cfg.output_dir}/{name}"):
            files.remove(f"{cfg.output_dir}/{name}")
    remove_tmp(cfg.output_dir)
    write_atomically(f"{cfg.output_dir}/{schema.MANIFEST_NAME}", manifest.to_json())
    yield manifest
