"""Rebuild the shipped samples from the full sets (see README.md beside this file):

python evaluation/sets/make_samples.py /path/to/simple_qa_test_set.csv /path/to/frames_test_set.csv
"""

from __future__ import annotations

import ast
import csv
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))

from evaluation.questions import seeded_sample  # noqa: E402

SEED = 71


def _write(path: Path, header: list[str], rows: list[list[str]]) -> None:
    with path.open("w", encoding="utf-8", newline="") as out:
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(header)
        writer.writerows(rows)


def _read(path: str) -> list[dict[str, str]]:
    with Path(path).open(encoding="utf-8") as file:
        return list(csv.DictReader(file))


def main(simpleqa: str, frames: str) -> None:
    rows = _read(simpleqa)
    picked = []
    for index in seeded_sample(len(rows), 30, SEED):
        row = rows[index]
        meta = ast.literal_eval(row["metadata"])
        picked.append(
            [str(index), row["question"].strip(), row["true_answer"].strip(), meta["topic"],
             meta["answer_type"], " ".join(meta["urls"])]
        )  # fmt: skip
    header = ["source_row", "question", "true_answer", "topic", "answer_type", "urls"]
    _write(HERE / "simpleqa-sample.csv", header, picked)

    rows = _read(frames)
    picked = []
    for index in seeded_sample(len(rows), 20, SEED):
        row = rows[index]
        links = " ".join(ast.literal_eval(row["wiki_links"]))
        picked.append(
            [str(index), row["question"].strip(), row["true_answer"].strip(),
             row["reasoning_types"], links]
        )  # fmt: skip
    header = ["source_row", "question", "true_answer", "reasoning_types", "wiki_links"]
    _write(HERE / "frames-sample.csv", header, picked)


if __name__ == "__main__":
    main(*sys.argv[1:3])
