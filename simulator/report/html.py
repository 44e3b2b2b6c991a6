"""report.md -> a self-contained report.html (plots embedded, every user string escaped).

Only the Markdown the report writes is understood: headings, paragraphs, pipe tables,
``- `` lists, ``> `` quotes, images, **bold**, _italic_ and `code`. Text is escaped before
any markup is applied, so a scenario name or note can never inject HTML.
"""

from __future__ import annotations

import base64
import html
import re
from pathlib import Path

_CSS = """body{font-family:system-ui,-apple-system,Segoe UI,sans-serif;max-width:1100px;
margin:2em auto;padding:0 1em;color:#222;line-height:1.45}
table{border-collapse:collapse;margin:.8em 0}td,th{border:1px solid #ccc;padding:.3em .6em}
th{background:#f3f3f3}td.r,th.r{text-align:right}img{max-width:100%}
blockquote{border-left:4px solid #c33;margin:1em 0;padding:.3em 1em;background:#fff4f4}
code{background:#f4f4f4;padding:0 .2em}"""


def _inline(text: str) -> str:
    # report.md writes user text with & < > as character references (outputs.md_text):
    # read back as the characters, then escaped once
    s = html.escape(html.unescape(text), quote=True)
    s = re.sub(r"`([^`]+)`", r"<code>\1</code>", s)
    s = re.sub(r"\*\*([^*]+)\*\*", r"<strong>\1</strong>", s)
    s = re.sub(r"(?<![\w/])_([^_]+)_(?![\w/])", r"<em>\1</em>", s)
    return s


def _image(alt: str, src: str, base: Path) -> str:
    path = base / src
    if re.fullmatch(r"[\w.-]+\.png", src) and path.is_file():
        data = base64.b64encode(path.read_bytes()).decode("ascii")
        return f'<img alt="{html.escape(alt)}" src="data:image/png;base64,{data}">'
    return f"<p><em>missing image {html.escape(src)}</em></p>"


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def markdown_to_html(md: str, base: Path, title: str = "specsim report") -> str:
    out: list[str] = []
    lines = md.splitlines()
    i = 0
    para: list[str] = []

    def flush() -> None:
        if para:
            out.append("<p>" + _inline(" ".join(para)) + "</p>")
            para.clear()

    while i < len(lines):
        line = lines[i]
        img = re.fullmatch(r"!\[([^\]]*)\]\(([^)]+)\)", line.strip())
        if not line.strip():
            flush()
        elif m := re.fullmatch(r"(#{1,4}) (.*)", line):
            flush()
            n = len(m.group(1))
            out.append(f"<h{n}>{_inline(m.group(2))}</h{n}>")
        elif img:
            flush()
            out.append(_image(img.group(1), img.group(2), base))
        elif line.startswith("|") and i + 1 < len(lines) and re.fullmatch(
                r"\|?\s*:?-+:?\s*(\|\s*:?-+:?\s*)*\|?", lines[i + 1].strip()):
            flush()
            head = _cells(line)
            right = [c.strip().endswith(":") for c in _cells(lines[i + 1])]
            rows = []
            i += 2
            while i < len(lines) and lines[i].startswith("|"):
                rows.append(_cells(lines[i]))
                i += 1

            def cls(j: int, right: list[bool] = right) -> str:
                return ' class="r"' if j < len(right) and right[j] else ""

            out.append("<table><tr>" + "".join(f"<th{cls(j)}>{_inline(c)}</th>"
                                                for j, c in enumerate(head)) + "</tr>")
            for r in rows:
                out.append("<tr>" + "".join(f"<td{cls(j)}>{_inline(c)}</td>"
                                            for j, c in enumerate(r)) + "</tr>")
            out.append("</table>")
            continue
        elif line.startswith("- "):
            flush()
            items = []
            while i < len(lines) and lines[i].startswith("- "):
                items.append(f"<li>{_inline(lines[i][2:])}</li>")
                i += 1
            out.append("<ul>" + "".join(items) + "</ul>")
            continue
        elif line.startswith("> "):
            flush()
            out.append(f"<blockquote>{_inline(line[2:])}</blockquote>")
        else:
            para.append(line)
        i += 1
    flush()
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{html.escape(title)}</title><style>{_CSS}</style></head><body>\n"
            + "\n".join(out) + "\n</body></html>\n")
