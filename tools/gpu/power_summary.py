#!/usr/bin/env python3
"""Summarises the power and clock samples that run_gpu_suite.sh records.

  power_summary.py power.csv phases.txt

power.csv: `nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu,
clocks_event_reasons.active --format=csv,noheader -lms N` lines. phases.txt: one
"<timestamp> <phase>" line where each phase starts, in nvidia-smi's timestamp format, so
the two sort alike; a last line named "end" ends the last phase. Prints, per phase, the
samples' highest board power, the SM clock's range and how many samples had a
clock-lowering reason set. A benchmark phase whose samples show the power cap ran below the
full clock: compute-bound kernels then measure slower.
"""
import sys

# clocks_event_reasons bits (NVML's nvmlClocksEventReason*) that lower the clock.
REASONS = {
    "power cap": 0x4 | 0x80,  # software power cap, hardware power brake
    "thermal": 0x20 | 0x40,  # software and hardware thermal slowdown
    "hw slowdown": 0x8,
}


def read_samples(path):
    samples = []
    with open(path) as f:
        for line in f:
            parts = [p.strip() for p in line.split(",")]
            if len(parts) != 5:
                continue
            stamp, clock, power, temp, reasons = parts
            try:
                samples.append((stamp, float(clock.split()[0]), float(power.split()[0]),
                                float(temp), int(reasons, 16)))
            except ValueError:
                continue  # "[N/A]" fields, a header, a cut-off last line
    return samples


def read_phases(path):
    phases = []
    with open(path) as f:
        for line in f:
            date, time, name = (line.rstrip("\n").split(" ", 2) + ["", ""])[:3]
            if name:
                phases.append((f"{date} {time}", name))
    return phases


def main(argv):
    if len(argv) != 3:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    samples = read_samples(argv[1])
    phases = read_phases(argv[2])
    end = "9999"
    if phases and phases[-1][1] == "end":
        end = phases.pop()[0]
    print(f"{'phase':<24}{'samples':>8}{'max W':>8}{'SM MHz':>12}{'max C':>7}  clock lowered by")
    for i, (start, name) in enumerate(phases):
        stop = phases[i + 1][0] if i + 1 < len(phases) else end
        mine = [s for s in samples if start <= s[0] < stop]
        if not mine:
            print(f"{name:<24}{0:>8}")
            continue
        clocks = [s[1] for s in mine]
        lowered = []
        for label, bits in REASONS.items():
            n = sum(1 for s in mine if s[4] & bits)
            if n:
                lowered.append(f"{label} {100 * n / len(mine):.0f}%")
        print(f"{name:<24}{len(mine):>8}{max(s[2] for s in mine):>8.0f}"
              f"{f'{min(clocks):.0f}-{max(clocks):.0f}':>12}{max(s[3] for s in mine):>7.0f}"
              f"  {', '.join(lowered) or 'nothing'}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
