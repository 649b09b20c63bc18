"""datatrove's side of bench/curation.py, run in .venv-datatrove (datatrove 0.10.1 and spaCy for
its English word tokenizer; its dill and cloudpickle would replace Beam's in the main one).

    .venv-datatrove/bin/python bench/curation_datatrove.py DOCS_FOLDER WORK_FOLDER > result.json

DOCS_FOLDER holds JSONL files of {"id", "text"}. Prints a JSON object: the MinHash dedup's wall
seconds and removed ids (its 4 stages on LocalPipelineExecutor, 2 tasks and 2 workers: this
machine's cores), and per filter family the wall seconds and each document's rejection reason
(null: kept), calling each filter's `filter(document)` as its pipeline step does.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from datatrove.data import Document
from datatrove.executor import LocalPipelineExecutor
from datatrove.pipeline.dedup.minhash import (
    MinhashConfig,
    MinhashDedupBuckets,
    MinhashDedupCluster,
    MinhashDedupFilter,
    MinhashDedupSignature,
)
from datatrove.pipeline.filters import C4QualityFilter, GopherQualityFilter, GopherRepetitionFilter
from datatrove.pipeline.readers import JsonlReader
from datatrove.pipeline.writers import JsonlWriter
from datatrove.utils.hashing import HashConfig

TASKS = 2


def minhash(docs: Path, work: Path) -> dict:
    config = MinhashConfig(
        n_grams=5, num_buckets=14, hashes_per_bucket=8, hash_config=HashConfig(precision=64)
    )

    def run(pipeline, tasks=TASKS):
        logs = str(work / f"logs{time.time_ns()}")
        LocalPipelineExecutor(pipeline=pipeline, tasks=tasks, workers=TASKS, logging_dir=logs,
                              skip_completed=False).run()  # fmt: skip

    start = time.perf_counter()
    run(
        [JsonlReader(str(docs)), MinhashDedupSignature(output_folder=str(work / "signatures"), config=config)]
    )
    run([MinhashDedupBuckets(input_folder=str(work / "signatures"), output_folder=str(work / "buckets"),
                             config=config)], tasks=config.num_buckets)  # fmt: skip
    run([MinhashDedupCluster(input_folder=str(work / "buckets"), output_folder=str(work / "remove_ids"),
                             config=config, save_cluster_size=True)], tasks=1)  # fmt: skip
    run([JsonlReader(str(docs)),
         MinhashDedupFilter(input_folder=str(work / "remove_ids"), load_cluster_sizes=True,
                            exclusion_writer=JsonlWriter(str(work / "removed"), compression=None)),
         JsonlWriter(str(work / "kept"), compression=None)])  # fmt: skip
    seconds = time.perf_counter() - start

    def rows(folder: str) -> list[dict]:
        return [
            json.loads(line)
            for path in sorted((work / folder).glob("*.jsonl"))
            for line in path.read_text().splitlines()
        ]

    removed = sorted(row["id"] for row in rows("removed"))
    clustered = removed + [
        row["id"] for row in rows("kept") if row["metadata"].get("minhash_cluster_size", 1) > 1
    ]
    return {"seconds": round(seconds, 2), "removed": removed, "clustered": sorted(clustered)}


def filters(docs: Path) -> dict:
    documents = [
        json.loads(line) for path in sorted(docs.glob("*.jsonl")) for line in path.read_text().splitlines()
    ]
    families = {
        "gopher_repetition": GopherRepetitionFilter(),
        "gopher_quality": GopherQualityFilter(),
        "c4": C4QualityFilter(filter_no_terminal_punct=True),
    }
    out = {}
    for name, step in families.items():
        reasons = {}
        start = time.process_time()
        for doc in documents:
            verdict = step.filter(Document(text=doc["text"], id=doc["id"]))
            reasons[doc["id"]] = (
                None if verdict is True else (verdict[1] if isinstance(verdict, tuple) else "removed")
            )
        out[name] = {"cpu_seconds": round(time.process_time() - start, 3), "reasons": reasons}
    return out


def main() -> int:
    docs, work = Path(sys.argv[1]), Path(sys.argv[2])
    work.mkdir(parents=True, exist_ok=True)
    result = {"minhash": minhash(docs, work), "filters": filters(docs)}
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
