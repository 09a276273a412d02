"""The instructor's report from grades.csv: how the class did on each exercise, and the mistakes it made.

    python -m grader report grades/      # writes grades/report.md and grades/report.png

report.md has one table row per lesson and check (submissions, mean score,
full marks, zero, not graded normally) and, for each check, its most common
messages: the checks name the mistake, so the commonest messages are the
class's commonest mistakes. report.png plots each check's mean score as a
fraction of its points, with the share of full marks.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pandas as pd
from matplotlib.figure import Figure

from grader.pipeline.grades import TEXT_FIELDS, csv_untext
from grader.pipeline.privacy import private_files
from grader.pipeline.scoring import md_text

TOP_MESSAGES = 5


def _mistake(message: str) -> str:
    """A message with the notes the grader appended cut off, and numbers blurred, so the same mistake counts once."""
    first = message.split("; check cell")[0]
    first = re.sub(r"\d+(\.\d+)?(e[-+]?\d+)?", "N", first)
    return first[:300]


def summarize(grades: pd.DataFrame) -> pd.DataFrame:
    """One row per lesson and check: submissions, mean score and points, share with full marks, zero, odd."""
    rows = []
    for (lesson, grade_id), part in grades.groupby(["lesson", "grade_id"], sort=False):
        points = float(part["max_score"].max())
        rows.append({
            "lesson": lesson, "check": grade_id, "submissions": len(part), "points": points,
            "mean score": round(float(part["score"].mean()), 2),
            "full marks": f"{(part['score'] >= part['max_score']).mean():.0%}",
            "zero": f"{(part['score'] <= 0).mean():.0%}",
            "not graded normally": int((~part["status"].isin(["passed", "failed"])).sum()),
        })
    return pd.DataFrame(rows)


def common_messages(grades: pd.DataFrame, top: int = TOP_MESSAGES) -> dict[tuple[str, str], list[tuple[str, int]]]:
    """(lesson, check) -> its most common messages among submissions that lost points, with counts."""
    found = {}
    for (lesson, grade_id), part in grades.groupby(["lesson", "grade_id"], sort=False):
        lost = part[part["score"] < part["max_score"]]
        found[(lesson, grade_id)] = Counter(_mistake(str(m)) for m in lost["message"].fillna("")).most_common(top)
    return found


def figure(table: pd.DataFrame) -> Figure:
    """Each check's mean score as a share of its points, and the share with full marks (matplotlib Figure)."""
    labels = [f"{lesson}\n{check}" for lesson, check in zip(table["lesson"], table["check"])]
    mean_share = [m / p if p else 0.0 for m, p in zip(table["mean score"], table["points"])]
    full = [float(str(v).rstrip("%")) / 100 for v in table["full marks"]]
    fig = Figure(figsize=(max(6, 0.9 * len(labels) + 2), 4.5))
    ax = fig.subplots()
    xs = range(len(labels))
    ax.bar([x - 0.2 for x in xs], mean_share, width=0.4, label="mean score / points")
    ax.bar([x + 0.2 for x in xs], full, width=0.4, label="share with full marks")
    ax.set_xticks(list(xs), labels, rotation=45, ha="right", fontsize=8)
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("share of the class")
    ax.set_title(f"How the class did on each check ({int(table['submissions'].max()) if len(table) else 0} submissions)")
    ax.legend(loc="upper right", fontsize=8)
    fig.tight_layout()
    return fig


def markdown(table: pd.DataFrame, messages: dict, png_name: str) -> str:
    """The report as Markdown: the table, the plot, and each check's commonest mistakes."""
    lines = ["# Class report", "", f"![scores per check]({png_name})", "", _table_md(table), "", "## Commonest mistakes", ""]
    for (lesson, check), common in messages.items():
        lines.append(f"### {md_text(lesson)} · {md_text(check)}")
        if not common:
            lines.append("- nobody lost a point here")
        for text, count in common:
            lines.append(f"- {count} × {md_text(text) if text else '(no message)'}")
        lines.append("")
    return "\n".join(lines)


def _table_md(table: pd.DataFrame) -> str:
    """A DataFrame as a Markdown table."""
    head = "| " + " | ".join(table.columns) + " |"
    rule = "|" + "---|" * len(table.columns)
    body = ["| " + " | ".join(md_text(v) for v in row) + " |" for row in table.itertuples(index=False)]
    return "\n".join([head, rule, *body])


def report(grades: Path, out_dir: Path | None = None) -> list[Path]:
    """Write report.md and report.png for grades.csv (or a folder holding it); returns their paths."""
    csv_path = grades / "grades.csv" if grades.is_dir() else grades
    if not csv_path.is_file():
        raise FileNotFoundError(f"no grades.csv at {csv_path}: run `python -m grader autograde` first")
    out_dir = out_dir or csv_path.parent
    with private_files(out_dir):
        return _report(csv_path, out_dir)


def _report(csv_path: Path, out_dir: Path) -> list[Path]:
    data = pd.read_csv(csv_path, keep_default_na=False, dtype={k: str for k in TEXT_FIELDS})
    for column in TEXT_FIELDS:  # grades.csv guards formula-like text with an apostrophe: take it off
        data[column] = data[column].map(csv_untext)
    data["score"], data["max_score"] = data["score"].astype(float), data["max_score"].astype(float)
    table = summarize(data)
    png, md = out_dir / "report.png", out_dir / "report.md"
    figure(table).savefig(png, dpi=110)
    md.write_text(markdown(table, common_messages(data), png.name), encoding="utf-8")
    return [md, png]
