#!/usr/bin/env python3
"""Runs `sparkrt demo --trace` on the backend SPARKRT_BACKEND names, checks the
trace it writes (every op of the decode step launched, with its grid and block,
and run on the device, with its device duration on its stream's track;
well-formed spans; named tracks), then renders it with tools/trace_png.py and
checks the PNG. Exits 77 (skipped) when the backend has no usable device here.

    check_demo_trace.py SPARKRT_BINARY TRACE_PNG_TOOL WORK_DIR
"""
import json
import os
import struct
import subprocess
import sys
import zlib

# The decode step's launches: entry name -> what it is.
DECODE_OPS = {
    "fill_slots_from_block_table": "slot mapping",
    "fused_k_norm_rope_cache_write_bf16": "K cache write",
    "reshape_and_cache_flash_v_only": "V cache write",
}
ATTENTION_PREFIX = "paged_decode_attn_"
HOST_PID = 1


def fail(message):
    print("FAIL: " + message)
    sys.exit(1)


def check_dims(span, key):
    dims = span["args"].get(key)
    if not (isinstance(dims, list) and len(dims) == 3 and
            all(isinstance(d, int) and d >= 1 for d in dims)):
        fail("%s launch: %s is %r, not three positive integers" % (span["name"], key, dims))


def check_device_spans(spans, launches, real_clock):
    """Each host launch has its device span, in the same order, on a device
    track; on a real clock the device ran it after the host queued it."""
    device = [e for e in spans if e["cat"] == "launch" and e["pid"] != HOST_PID]
    for entry in sorted({e["name"] for e in launches}):
        host = sorted((e for e in launches if e["name"] == entry), key=lambda e: e["ts"])
        ran = [e for e in device if e["name"] == entry]
        if len(ran) != len(host):
            fail("%s: %d launches but %d device spans" % (entry, len(host), len(ran)))
        for queued, run in zip(host, ran):
            if run["args"].get("grid") != queued["args"]["grid"]:
                fail("%s: device span %r for launch %r" % (entry, run, queued))
            if real_clock and run["ts"] + 0.002 < queued["ts"]:
                fail("%s: ran on the device at %.3f, before it was queued at %.3f" %
                     (entry, run["ts"], queued["ts"]))
    if not any(e["dur"] > 0 for e in device):
        fail("every device span lasts 0 us")


def check_trace(path, real_clock):
    with open(path, encoding="utf-8") as f:
        trace = json.load(f)
    events = trace["traceEvents"]
    spans = [e for e in events if e["ph"] == "X"]
    if not spans:
        fail("the trace has no spans")
    for e in spans:
        for key in ("name", "cat", "ts", "dur", "pid", "tid", "args"):
            if key not in e:
                fail("span without %r: %r" % (key, e))
        if not (isinstance(e["ts"], (int, float)) and e["ts"] >= 0 and e["dur"] >= 0):
            fail("span with a bad time: %r" % e)

    # On each host track, spans nest or follow each other: never a partial
    # overlap. (Device work may overlap: a dependent launch starts early.)
    tracks = {}
    for e in spans:
        tracks.setdefault((e["pid"], e["tid"]), []).append(e)
    slack = 0.002  # the microsecond values carry three decimals
    for (pid, tid), track in tracks.items():
        if pid != HOST_PID:
            continue
        open_ends = []
        for e in sorted(track, key=lambda s: (s["ts"], -s["dur"])):
            while open_ends and open_ends[-1] <= e["ts"] + slack:
                open_ends.pop()
            if open_ends and e["ts"] + e["dur"] > open_ends[-1] + slack:
                fail("track %d: %s at %.3f overlaps its caller's end %.3f" %
                     (tid, e["name"], e["ts"], open_ends[-1]))
            open_ends.append(e["ts"] + e["dur"])

    named = {(e["pid"], e["tid"]) for e in events
             if e["ph"] == "M" and e["name"] == "thread_name"}
    if not set(tracks) <= named:
        fail("tracks without a thread_name: %s" % sorted(set(tracks) - named))
    for e in events:
        if e["ph"] == "i":
            fail("the trace says: %s: %r" % (e["name"], e.get("args")))

    launches = [e for e in spans if e["cat"] == "launch" and e["pid"] == HOST_PID]
    for e in launches:
        check_dims(e, "grid")
        check_dims(e, "block")
        if e["args"].get("entry") != e["name"] or e["args"].get("failed") is not False:
            fail("launch span %r" % e)
    names = {e["name"] for e in launches}
    for entry, what in DECODE_OPS.items():
        if entry not in names:
            fail("no launch of %s (%s); launched: %s" % (entry, what, sorted(names)))
    if not any(n.startswith(ATTENTION_PREFIX) for n in names):
        fail("no %s* launch; launched: %s" % (ATTENTION_PREFIX, sorted(names)))
    check_device_spans(spans, launches, real_clock)
    steps = [e for e in spans if e["cat"] == "user" and e["name"].startswith("decode step")]
    if not steps:
        fail("no \"decode step\" range (trace::Range) in the trace")
    for step in steps:
        inside = [e for e in launches
                  if step["ts"] <= e["ts"] and e["ts"] + e["dur"] <= step["ts"] + step["dur"] + slack]
        if {e["name"] for e in inside} < set(DECODE_OPS):
            fail("%s at %.3f holds the launches %s" %
                 (step["name"], step["ts"], sorted({e["name"] for e in inside})))
    loads = [e for e in spans if e["name"] == "module_load"]
    if not loads or not all(e["args"].get("origin") for e in loads):
        fail("module loads without their origin: %r" % loads)
    print("trace: %d spans on %d tracks, %d launches of %s, each with its device span" %
          (len(spans), len(tracks), len(launches), ", ".join(sorted(names))))


def check_png(path):
    with open(path, "rb") as f:
        data = f.read()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        fail("%s: not a PNG signature" % path)
    length, kind = struct.unpack(">I4s", data[8:16])
    if kind != b"IHDR" or length != 13:
        fail("%s: the first chunk is not IHDR" % path)
    width, height, depth, color = struct.unpack(">IIBB", data[16:26])
    if (width, depth, color) != (1200, 8, 2) or not 40 <= height <= 2000:
        fail("%s: %dx%d, depth %d, color type %d" % (path, width, height, depth, color))
    # Walk the chunks, checking each CRC, and inflate the pixels.
    pos, idat = 8, b""
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 4:pos + 8 + length]
        (crc,) = struct.unpack(">I", data[pos + 8 + length:pos + 12 + length])
        if zlib.crc32(body) != crc:
            fail("%s: bad CRC in %r" % (path, kind))
        if kind == b"IDAT":
            idat += body[4:]
        pos += 12 + length
    pixels = zlib.decompress(idat)
    if len(pixels) != height * (1 + 3 * width):
        fail("%s: %d bytes of pixels for %dx%d" % (path, len(pixels), width, height))
    if len(set(pixels[i:i + 3] for i in range(1, len(pixels) - 3, 3 * 7))) < 4:
        fail("%s: the image is (nearly) blank" % path)
    print("png: %dx%d" % (width, height))


def main():
    sparkrt, png_tool, work_dir = sys.argv[1:4]
    backend = os.environ.get("SPARKRT_BACKEND", "")
    os.makedirs(work_dir, exist_ok=True)
    trace = os.path.join(work_dir, "demo_trace_%s.json" % backend)
    png = os.path.join(work_dir, "demo_trace_%s.png" % backend)
    for stale in (trace, png):
        if os.path.exists(stale):
            os.remove(stale)
    if backend in ("cuda", "vulkan"):
        probe = subprocess.run([sparkrt, "info"], capture_output=True, text=True)
        if probe.returncode != 0:
            print("SKIPPED: no usable %s device here: %s" % (backend, probe.stderr.strip()[-300:]))
            sys.exit(77)
    run = subprocess.run([sparkrt, "demo", "--trace", trace], capture_output=True, text=True)
    sys.stdout.write(run.stdout[-2000:])
    if run.returncode != 0:
        fail("sparkrt demo exited with %d: %s" % (run.returncode, run.stderr))
    if "trace: the decode step written to " + trace not in run.stdout:
        fail("the demo did not say where the trace went")
    # The mock's clock is fake: one microsecond per operation.
    check_trace(trace, real_clock=backend != "mock")
    step_png = os.path.join(work_dir, "demo_trace_%s_step.png" % backend)
    focus = "decode step" if backend != "mock" else "decode step (warm-up)"
    for out, extra in ((png, []), (step_png, ["--focus", focus])):
        run = subprocess.run([sys.executable, png_tool, trace, out, "--width", "1200"] + extra,
                             capture_output=True, text=True)
        if run.returncode != 0:
            fail("trace_png.py %s exited with %d: %s" % (" ".join(extra), run.returncode,
                                                        run.stderr))
        check_png(out)
    run = subprocess.run([sys.executable, png_tool, trace, png, "--focus", "no such span"],
                         capture_output=True, text=True)
    if run.returncode == 0 or "no span named 'no such span'" not in run.stderr:
        fail("trace_png.py --focus on a missing span: exit %d, %r" % (run.returncode, run.stderr))
    print("check: passed")


if __name__ == "__main__":
    main()
