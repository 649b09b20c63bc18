"""What curation removed from a built corpus, as a person reads it before training.

    python -m pipeline.curation_report OUTPUT            # the table, then a few removed samples
    python -m pipeline.curation_report OUTPUT --samples 0

Reads OUTPUT/manifest.json (or, for a build of several lengths, the first OUTPUT/seq*/ one: their
curation figures are the same) and the samples in OUTPUT/curation/.
"""

from __future__ import annotations

import gzip
import json
import sys

from common.cli import Parser, first_paragraph, run_cli
from pipeline import files, schema
from pipeline.curation.samples import CURATION_DIR

PROG = "python -m pipeline.curation_report"


def find_manifest(output: str) -> schema.Manifest:
    """The corpus's manifest (read through Beam's filesystems: no TensorFlow to import)."""
    output = output.rstrip("/")
    found = [f"{output}/{schema.MANIFEST_NAME}"] if files.exists(f"{output}/{schema.MANIFEST_NAME}") else []
    found = found or files.glob(f"{output}/seq*/{schema.MANIFEST_NAME}")
    if not found:
        raise schema.ManifestError(
            f"{output}: no {schema.MANIFEST_NAME} here or in seq*/; build the corpus first"
        )
    return schema.read_built_manifest(found[0].rsplit("/", 1)[0])


def _share(part: int, whole: int) -> str:
    return f"{part / whole:.1%}" if whole else "-"


def table(manifest: schema.Manifest) -> list[str]:
    """The removals per stage and rule, against the documents read."""
    curation = manifest.curation
    if not curation:
        return [f"{manifest.path}: built before curation existed (no curation figures); rebuild to see them"]
    read = int(manifest.input.get("documents", 0))
    exact = int(manifest.input.get("skipped", {}).get("duplicate_document", 0))
    kept = sum(split.documents for split in manifest.splits.values())
    lines = [
        f"{manifest.folder}: {read:,} documents read, {exact:,} exact copies dropped, {kept:,} kept "
        f"({_share(kept, read)})",
        f"{'stage / reason':<40} {'documents':>11} {'of read':>8} {'bytes':>14}",
    ]

    def row(name: str, entry: dict) -> str:
        n = int(entry["documents_removed"])
        return f"{name:<40} {n:>11,} {_share(n, read):>8} {int(entry['bytes_removed']):>14,}"

    build = manifest.build
    on = {
        "language": bool(build.get("languages")),
        "quality": bool(build.get("quality_filters")),
        "near_dedup": bool(build.get("near_dedup_threshold")),
    }
    copies = int(curation.get("exact_dedup", {}).get("documents_removed", exact))
    lines.append(f"{'exact_dedup (always on)':<40} {copies:>11,} {_share(copies, read):>8} {'-':>14}")
    for stage in ("language", "quality", "near_dedup"):  # the order they run in
        entry = curation.get(stage, {"documents_removed": 0, "bytes_removed": 0})
        lines.append(row(stage if on[stage] else f"{stage} (off)", entry))
        if stage == "quality":
            for rule, counts in sorted(
                entry.get("rules", {}).items(), key=lambda kv: -kv[1]["documents_removed"]
            ):
                lines.append(row(f"  {rule}", counts))
        if stage == "language" and on[stage]:
            kept_by = ", ".join(f"{k} {v:,}" for k, v in entry.get("kept", {}).items()) or "none"
            removed_by = (
                ", ".join(f"{k} {v:,}" for k, v in entry.get("removed_by_language", {}).items()) or "none"
            )
            lines.append(f"  kept by language: {kept_by}; removed by language: {removed_by}")
        if stage == "near_dedup" and on[stage]:
            sizes = entry.get("cluster_sizes", {})
            shown = ", ".join(f"{n:,} of {size}" for size, n in sizes.items()) or "none"
            lines.append(f"  clusters (count of size): {shown}")
    return lines


def samples(output: str, per_reason: int) -> list[str]:
    """A few removed documents per reason, cut to a line each; near-duplicates beside the
    document their cluster kept."""
    lines = []
    for path in files.glob(f"{output.rstrip('/')}/{CURATION_DIR}/*.jsonl.gz"):
        rows = [
            json.loads(line) for line in gzip.decompress(files.read_file(path)).decode("utf-8").splitlines()
        ]
        lines.append(f"-- {path.rsplit('/', 1)[1]}: {len(rows)} sampled")
        for row in rows[:per_reason]:
            text = " ".join(row["text"].split())[:100]
            lines.append(f"   removed ({row['reason']} = {row['value']}): {text}")
            if "kept_text" in row:
                lines.append(f"   kept instead:  {' '.join(row['kept_text'].split())[:100]}")
    return lines


def parser() -> Parser:
    p = Parser(prog=PROG, description=first_paragraph(__doc__))
    p.add_argument("output", help="a corpus folder (--output of the build), local or gs://")
    p.add_argument("--samples", type=int, default=2, help="removed documents shown per reason")
    return p


def report(argv: list[str] | None) -> None:
    args = parser().parse_args(argv)
    print("\n".join(table(find_manifest(args.output))))
    if args.samples:
        print("\n".join(samples(args.output, args.samples)))


def main(argv: list[str] | None = None) -> int:
    return run_cli(report, sys.argv[1:] if argv is None else argv)


if __name__ == "__main__":
    sys.exit(main())
