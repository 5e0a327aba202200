"""Type stub for the C extension caveman_batch._fastscan (source: _fastscan.c)."""

def present(text: str, needles: tuple[str, ...], /) -> tuple[bool, ...]:
    """tuple(needle in text for needle in needles), in one pass over text."""

def plain(text: str, /) -> str:
    """The text without its ANSI escape codes (view._ANSI.sub("", text))."""

def led_lines(text: str, words: tuple[str, ...], /) -> list[int]:
    """The indexes of the lines (text.split("\\n")) a blank leads whose rest starts with one of
    words (stacktrace._led_frames), in one pass."""
