#!/usr/bin/env python3
"""Writes the Parquet test datasets of tests/unit/test_data_parquet.cpp with pyarrow.

tests/data/datasets/parquet_rows.parquet: five rows in verl's schema (as verl's gsm8k
preprocessing writes them: prompt list<struct<role, content>>, reward_model struct<style,
ground_truth>, extra_info struct<split, index, answer, question>) plus an int64 column, a float
column holding a null, a map column and a dictionary-encoded data_source, in row groups of two
rows so the reader crosses row-group boundaries. parquet_rows.jsonl holds the same rows as JSON
Lines (what pandas.read_parquet(...).to_json(orient="records", lines=True) gives, maps as objects),
so the test can check that both files give identical samples.

tests/data/datasets/parquet_unsupported.parquet: one row whose extra_info holds a timestamp, a
type the reader rejects by name.

Usage: python3 tools/scripts/make_parquet_golden.py [--out tests/data/datasets]
"""
import argparse
import datetime
import json
import os

import pyarrow as pa
import pyarrow.parquet as pq

QUESTIONS = [
    ("Natalia sold clips to 48 of her friends in April, and then half as many in May. How many altogether?", "72"),
    ("Weng earns $12 an hour for babysitting. Yesterday she did 50 minutes. How much did she earn?", "10"),
    ("Betty needs $100 for a wallet and has half of it. Her parents give $15, her grandparents twice that. How much more?", "5"),
    ("Julie reads 12 pages yesterday and twice as many today of a 120-page book. Half the rest tomorrow?", "42"),
    ("James writes a 3-page letter to 2 friends twice a week. How many pages a year?", "624"),
]
INSTRUCTION = 'Let\'s think step by step and output the final answer after "####".'


def rows():
    out = []
    for index, (question, answer) in enumerate(QUESTIONS):
        out.append({
            "data_source": "openai/gsm8k",
            "prompt": [{"role": "user", "content": f"{question} {INSTRUCTION}"}],
            "ability": "math",
            "reward_model": {"style": "rule", "ground_truth": answer},
            "extra_info": {"split": "train", "index": index, "answer": answer, "question": question},
            "num_steps": 10**12 + index,  # beyond int32: must come back as int64
            "difficulty": None if index == 2 else 0.25 * (index + 1),  # a null in a float column
            "tags": {"arith": index, "words": len(question.split())},
        })
    # A system message in one row: prompts are lists of any length.
    out[1]["prompt"].insert(0, {"role": "system", "content": "You are a careful solver."})
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "..", "tests", "data", "datasets"))
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)

    message = pa.struct([("role", pa.string()), ("content", pa.string())])
    schema = pa.schema([
        ("data_source", pa.dictionary(pa.int32(), pa.string())),
        ("prompt", pa.list_(message)),
        ("ability", pa.string()),
        ("reward_model", pa.struct([("style", pa.string()), ("ground_truth", pa.string())])),
        ("extra_info", pa.struct([("split", pa.string()), ("index", pa.int64()), ("answer", pa.string()),
                                  ("question", pa.string())])),
        ("num_steps", pa.int64()),
        ("difficulty", pa.float64()),
        ("tags", pa.map_(pa.string(), pa.int64())),
    ])
    data = rows()
    columns = {}
    for field in schema:
        values = [row[field.name] for row in data]
        if pa.types.is_map(field.type):
            values = [list(value.items()) for value in values]
        columns[field.name] = pa.array(values, type=field.type)
    table = pa.table(columns, schema=schema)
    pq.write_table(table, os.path.join(args.out, "parquet_rows.parquet"), row_group_size=2)
    with open(os.path.join(args.out, "parquet_rows.jsonl"), "w") as f:
        for row in data:
            f.write(json.dumps(row) + "\n")

    bad = pa.table({
        "data_source": ["openai/gsm8k"],
        "prompt": [[{"role": "user", "content": "1+1="}]],
        "extra_info": pa.array([{"index": 0, "created": datetime.datetime(2024, 1, 2, 3, 4, 5)}],
                               type=pa.struct([("index", pa.int64()), ("created", pa.timestamp("us"))])),
    })
    pq.write_table(bad, os.path.join(args.out, "parquet_unsupported.parquet"))


if __name__ == "__main__":
    main()
