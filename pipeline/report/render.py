"""Reports as a list of blocks, rendered to Markdown and to self-contained HTML; the evaluate
report (``pipeline.report``) and the tune study report (``pipeline.tune.report``) share it.

A block is a tuple: ``("h", level, text)``, ``("p", text)``, ``("ul", items)``,
``("table", head, rows)`` or ``("img", file name in the report folder, alt text)``; ``**bold**``
in text is bold in both renderings. The HTML embeds its images as base64 data URIs and has no
scripts and no links, so it renders offline and as an MLflow artifact.
"""

from __future__ import annotations

import base64
import html
import re
from collections.abc import Sequence
from pathlib import Path

Block = tuple

STYLE = (
    "body{font-family:sans-serif;max-width:1100px;margin:2em auto;line-height:1.4}"
    "table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:3px 8px;"
    "font-size:90%}th{background:#f0f0f0}img{max-width:100%}"
)


def to_markdown(blocks: Sequence[Block]) -> str:
    out = []
    for block in blocks:
        kind = block[0]
        if kind == "h":
            out.append("#" * block[1] + " " + block[2])
        elif kind == "p":
            out.append(block[1])
        elif kind == "ul":
            out.append("\n".join(f"- {item}" for item in block[1]))
        elif kind == "table":
            head, rows = block[1], block[2]
            esc = lambda s: str(s).replace("|", "\\|")
            lines = ["| " + " | ".join(map(esc, head)) + " |", "|" + "---|" * len(head)]
            lines += ["| " + " | ".join(map(esc, row)) + " |" for row in rows]
            out.append("\n".join(lines))
        elif kind == "img":
            out.append(f"![{block[2]}]({block[1]})")
    return "\n\n".join(out) + "\n"


def _inline(text: str) -> str:
    return re.sub(r"\*\*(.+?)\*\*", r"<strong>\1</strong>", html.escape(str(text)))


def to_html(blocks: Sequence[Block], folder: Path, title: str) -> str:
    """One HTML page with ``STYLE``; the images are read from ``folder``."""
    body = []
    for block in blocks:
        kind = block[0]
        if kind == "h":
            body.append(f"<h{block[1]}>{_inline(block[2])}</h{block[1]}>")
        elif kind == "p":
            body.append(f"<p>{_inline(block[1])}</p>")
        elif kind == "ul":
            body.append("<ul>" + "".join(f"<li>{_inline(item)}</li>" for item in block[1]) + "</ul>")
        elif kind == "table":
            head = "".join(f"<th>{_inline(h)}</th>" for h in block[1])
            rows = "".join(
                "<tr>" + "".join(f"<td>{_inline(c)}</td>" for c in row) + "</tr>" for row in block[2]
            )
            body.append(f"<table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>")
        elif kind == "img":
            body.append(f"<p>{png_img(folder / block[1], block[2])}</p>")
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{html.escape(title)}</title><style>{STYLE}</style></head>\n<body>\n"
        + "\n".join(body)
        + "\n</body></html>\n"
    )


def png_img(path: Path, alt: str) -> str:
    """An ``<img>`` element holding the PNG at ``path`` as a base64 data URI."""
    data = base64.b64encode(path.read_bytes()).decode("ascii")
    return f'<img alt="{html.escape(alt)}" src="data:image/png;base64,{data}">'
