"""PlanGroups: how many packing groups and shards each split gets, from its token count."""

from __future__ import annotations

import apache_beam as beam

from pipeline import schema
from pipeline.config import CorpusConfig


class PlanGroups(beam.PTransform):
    """(split, TokenizedDoc) -> one plan: the tokens per split decide groups and shard counts."""

    def __init__(self, cfg: CorpusConfig):
        super().__init__()
        self._cfg = cfg

    def expand(self, docs):
        return (
            docs
            | "TokensPerDoc" >> beam.Map(lambda sd: (sd[0], sd[1].n_tokens))
            | "SumTokens" >> beam.CombinePerKey(sum)
            | "TokensBySplit" >> beam.combiners.ToDict()
            | "Plan" >> beam.Map(make_plan, self._cfg)
        )


def estimate_instances(tokens: int, dupes: int, seq_len: int) -> int:
    """Rows a split's tokens make if every row is full: a lower bound, close for packed rows."""
    return dupes * -(-tokens // (seq_len - 2))


def make_plan(token_totals: dict, cfg: CorpusConfig) -> dict:
    """Per split: tokens, packing groups, shards. A pure function of the token counts."""
    plan = {}
    for split in schema.SPLITS:
        tokens = int(token_totals.get(split, 0))
        dupes = cfg.dupe_factor if split == "train" else 1
        estimated_instances = estimate_instances(tokens, dupes, cfg.seq_len)
        requested = cfg.num_shards if split == "train" else cfg.num_validation_shards
        shards = requested or max(1, -(-estimated_instances // cfg.records_per_shard))
        plan[split] = {
            "tokens": tokens,
            "groups": max(1, tokens // cfg.group_tokens),
            "shards": shards if tokens else 0,
            "dupes": dupes,
        }
    return plan
