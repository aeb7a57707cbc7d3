"""Version numbers as tuples: parsed from torch's and the system's strings, and shown again."""

from __future__ import annotations


def parse_version(text: str) -> tuple[int, ...]:
    """'2.13.0+cpu' -> (2, 13, 0); '14.6.1' -> (14, 6, 1); '' -> ()."""
    parts = []
    for piece in text.split("+")[0].split("."):
        digits = "".join(ch for ch in piece if ch.isdigit()) if piece[:1].isdigit() else ""
        if not digits:
            break
        parts.append(int(digits))
    return tuple(parts)


def version_text(version: tuple[int, ...]) -> str:
    return ".".join(str(p) for p in version) if version else "unknown"


__all__ = ["parse_version", "version_text"]
