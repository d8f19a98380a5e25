#!/usr/bin/env python3
"""Renders a Chrome trace JSON (sparkrt::trace, SPARKRT_TRACE, `sparkrt demo --trace`)
as a PNG timeline: one row per track (host threads, then each device's streams), each
complete ("X") event a box colored by its category and labelled with its name where it
fits, nested calls stacked below their caller, a time axis underneath and a legend of
the categories on top.

    tools/trace_png.py trace.json timeline.png [--width 1600] [--focus NAME]

--focus NAME draws only the time of the last span named NAME (a trace::Range such as
the demo's "decode step"), and what overlaps it.

Standard library only: the PNG is written with zlib and struct, the labels with a
5x7 bitmap font.
"""
import argparse
import json
import struct
import sys
import zlib

# 5x7 glyphs: 7 rows of 5 bits each, most significant bit leftmost. Lowercase
# letters are drawn as uppercase; characters without a glyph as '?'.
FONT = {
    "A": (14, 17, 17, 31, 17, 17, 17), "B": (30, 17, 17, 30, 17, 17, 30),
    "C": (14, 17, 16, 16, 16, 17, 14), "D": (30, 17, 17, 17, 17, 17, 30),
    "E": (31, 16, 16, 30, 16, 16, 31), "F": (31, 16, 16, 30, 16, 16, 16),
    "G": (14, 17, 16, 23, 17, 17, 15), "H": (17, 17, 17, 31, 17, 17, 17),
    "I": (14, 4, 4, 4, 4, 4, 14), "J": (7, 2, 2, 2, 2, 18, 12),
    "K": (17, 18, 20, 24, 20, 18, 17), "L": (16, 16, 16, 16, 16, 16, 31),
    "M": (17, 27, 21, 21, 17, 17, 17), "N": (17, 17, 25, 21, 19, 17, 17),
    "O": (14, 17, 17, 17, 17, 17, 14), "P": (30, 17, 17, 30, 16, 16, 16),
    "Q": (14, 17, 17, 17, 21, 18, 13), "R": (30, 17, 17, 30, 20, 18, 17),
    "S": (15, 16, 16, 14, 1, 1, 30), "T": (31, 4, 4, 4, 4, 4, 4),
    "U": (17, 17, 17, 17, 17, 17, 14), "V": (17, 17, 17, 17, 17, 10, 4),
    "W": (17, 17, 17, 21, 21, 21, 10), "X": (17, 17, 10, 4, 10, 17, 17),
    "Y": (17, 17, 10, 4, 4, 4, 4), "Z": (31, 1, 2, 4, 8, 16, 31),
    "0": (14, 17, 19, 21, 25, 17, 14), "1": (4, 12, 4, 4, 4, 4, 14),
    "2": (14, 17, 1, 2, 4, 8, 31), "3": (31, 2, 4, 2, 1, 17, 14),
    "4": (2, 6, 10, 18, 31, 2, 2), "5": (31, 16, 30, 1, 1, 17, 14),
    "6": (6, 8, 16, 30, 17, 17, 14), "7": (31, 1, 2, 4, 8, 8, 8),
    "8": (14, 17, 17, 14, 17, 17, 14), "9": (14, 17, 17, 15, 1, 2, 12),
    " ": (0, 0, 0, 0, 0, 0, 0), ".": (0, 0, 0, 0, 0, 12, 12),
    "_": (0, 0, 0, 0, 0, 0, 31), "-": (0, 0, 0, 31, 0, 0, 0),
    "(": (2, 4, 8, 8, 8, 4, 2), ")": (8, 4, 2, 2, 2, 4, 8),
    ":": (0, 12, 12, 0, 12, 12, 0), "/": (1, 1, 2, 4, 8, 16, 16),
    "?": (14, 17, 1, 2, 4, 0, 4),
}
CHAR_W = 6  # 5 pixels and a space

PALETTE = [(66, 133, 244), (219, 68, 55), (244, 180, 0), (15, 157, 88), (171, 71, 188),
           (0, 172, 193), (255, 112, 67), (158, 157, 36), (92, 107, 192), (240, 98, 146)]
BACKGROUND = (255, 255, 255)
INK = (40, 40, 40)
GRID = (225, 225, 225)

ROW_DEPTH_PX = 12  # height of one nesting level in a track
LABEL_PX = 170     # track names on the left
TOP_PX = 28        # legend
AXIS_PX = 30       # time axis


class Canvas:
    def __init__(self, width, height):
        self.width, self.height = width, height
        self.pixels = bytearray(bytes(BACKGROUND) * (width * height))

    def rect(self, x0, y0, x1, y1, color):
        x0, x1 = max(0, int(x0)), min(self.width, int(x1))
        y0, y1 = max(0, int(y0)), min(self.height, int(y1))
        if x0 >= x1:
            return
        run = bytes(color) * (x1 - x0)
        for y in range(y0, y1):
            start = (y * self.width + x0) * 3
            self.pixels[start:start + len(run)] = run

    def text(self, x, y, s, color=INK):
        for i, ch in enumerate(s):
            glyph = FONT.get(ch.upper(), FONT["?"])
            for row, bits in enumerate(glyph):
                for col in range(5):
                    if bits >> (4 - col) & 1:
                        self.rect(x + i * CHAR_W + col, y + row,
                                  x + i * CHAR_W + col + 1, y + row + 1, color)

    def png(self):
        raw = bytearray()
        stride = self.width * 3
        for y in range(self.height):
            raw.append(0)  # filter: none
            raw += self.pixels[y * stride:(y + 1) * stride]

        def chunk(kind, data):
            body = kind + data
            return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

        header = struct.pack(">IIBBBBB", self.width, self.height, 8, 2, 0, 0, 0)
        return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) +
                chunk(b"IDAT", zlib.compress(bytes(raw), 9)) + chunk(b"IEND", b""))


def focus_window(events, name):
    """(start, end) of the last complete event named `name`, or None."""
    last = None
    for e in events:
        if e.get("ph") == "X" and e.get("name") == name:
            if last is None or float(e["ts"]) >= float(last["ts"]):
                last = e
    if last is None:
        return None
    return float(last["ts"]), float(last["ts"]) + float(last.get("dur", 0))


def load_tracks(trace, window=None):
    """Returns ([(name, [(ts, dur, category, depth, label)])], t0, t1), tracks by sort
    order; with a window (start, end), only the spans overlapping it, clipped to it."""
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    names, order, spans = {}, {}, {}
    for e in events:
        key = (e.get("pid", 0), e.get("tid", 0))
        if e.get("ph") == "M" and e.get("name") == "thread_name":
            names[key] = str(e.get("args", {}).get("name", ""))
        elif e.get("ph") == "M" and e.get("name") == "thread_sort_index":
            order[key] = e.get("args", {}).get("sort_index", 0)
        elif e.get("ph") == "X":
            ts, dur = float(e["ts"]), float(e.get("dur", 0))
            if window is not None:
                if ts > window[1] or ts + dur < window[0]:
                    continue
                end = min(ts + dur, window[1])
                ts = max(ts, window[0])
                dur = end - ts
            spans.setdefault(key, []).append(
                (ts, dur, str(e.get("cat", "")), str(e.get("name", ""))))
    if not spans:
        return [], 0.0, 1.0
    tracks = []
    for key in sorted(spans, key=lambda k: (order.get(k, 0), k)):
        laid_out, open_ends = [], []
        # Callers first: earlier start, then the longer span.
        for ts, dur, cat, label in sorted(spans[key], key=lambda s: (s[0], -s[1])):
            while open_ends and open_ends[-1] <= ts:
                open_ends.pop()
            laid_out.append((ts, dur, cat, len(open_ends), label))
            open_ends.append(ts + dur)
        tracks.append((names.get(key, "thread %s" % key[1]), laid_out))
    t0 = window[0] if window else min(s[0] for _, spans_ in tracks for s in spans_)
    t1 = window[1] if window else max(s[0] + s[1] for _, spans_ in tracks for s in spans_)
    return tracks, t0, max(t1, t0 + 1.0)


def nice_step(span_us, ticks):
    raw = span_us / ticks
    step = 1.0
    while step * 10 <= raw:
        step *= 10
    for m in (1, 2, 5, 10):
        if step * m >= raw:
            return step * m
    return step * 10


def time_label(us):
    if us >= 1e6:
        return "%gs" % round(us / 1e6, 3)
    if us >= 1e3:
        return "%gms" % round(us / 1e3, 3)
    return "%gus" % round(us, 3)


def render(trace, width, window=None):
    tracks, t0, t1 = load_tracks(trace, window)
    categories = sorted({s[2] for _, spans in tracks for s in spans})
    colors = {c: PALETTE[i % len(PALETTE)] for i, c in enumerate(categories)}
    heights = [(max((s[3] for s in spans), default=0) + 1) * ROW_DEPTH_PX + 8
               for _, spans in tracks]
    height = TOP_PX + sum(heights) + AXIS_PX
    canvas = Canvas(width, height)
    plot_w = width - LABEL_PX - 10
    scale = plot_w / (t1 - t0)

    x = 4
    for c in categories:
        canvas.rect(x, 8, x + 12, 20, colors[c])
        canvas.text(x + 16, 10, c)
        x += 16 + CHAR_W * len(c) + 14

    y = TOP_PX
    for (name, spans), h in zip(tracks, heights):
        canvas.rect(0, y, width, y + 1, GRID)
        canvas.text(4, y + 4, name[:(LABEL_PX - 8) // CHAR_W])
        for ts, dur, cat, depth, label in spans:
            x0 = LABEL_PX + (ts - t0) * scale
            x1 = max(x0 + 1, LABEL_PX + (ts + dur - t0) * scale)
            top = y + 4 + depth * ROW_DEPTH_PX
            canvas.rect(x0, top, x1, top + ROW_DEPTH_PX - 2, colors[cat])
            fits = int((x1 - x0 - 4) // CHAR_W)
            if fits >= 4:
                canvas.text(x0 + 3, top + 1, label[:fits], BACKGROUND)
        y += h

    canvas.rect(LABEL_PX, y, LABEL_PX + plot_w, y + 1, INK)
    step = nice_step(t1 - t0, 8)
    tick = 0.0
    while tick <= t1 - t0:
        tx = LABEL_PX + tick * scale
        canvas.rect(tx, y, tx + 1, y + 5, INK)
        canvas.text(tx + 2, y + 8, time_label(tick))
        tick += step
    return canvas, len(tracks), sum(len(s) for _, s in tracks)


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace", help="Chrome trace JSON")
    parser.add_argument("png", help="the PNG to write")
    parser.add_argument("--width", type=int, default=1600, help="image width in pixels")
    parser.add_argument("--focus", metavar="NAME",
                        help="draw only the time of the last span named NAME")
    args = parser.parse_args(argv)
    if args.width < LABEL_PX + 100:
        parser.error("--width must be at least %d" % (LABEL_PX + 100))
    with open(args.trace, encoding="utf-8") as f:
        trace = json.load(f)
    window = None
    if args.focus is not None:
        events = trace["traceEvents"] if isinstance(trace, dict) else trace
        window = focus_window(events, args.focus)
        if window is None:
            parser.error("--focus: the trace has no span named %r" % args.focus)
        pad = max(0.02 * (window[1] - window[0]), 0.5)
        window = (window[0] - pad, window[1] + pad)
    canvas, num_tracks, num_spans = render(trace, args.width, window)
    with open(args.png, "wb") as f:
        f.write(canvas.png())
    print("%s: %d spans on %d tracks, %dx%d pixels" %
          (args.png, num_spans, num_tracks, canvas.width, canvas.height))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
