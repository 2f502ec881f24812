#!/usr/bin/python3
"""Draws a braid_switch --series CSV: the queue of every core link direction
that carried data (top) and what each host's flows got delivered (bottom,
Mb/s over --window-ms), one PNG.

  scripts/plot-switch-series.py series.csv out.png [--title T] [--window-ms 10]
"""
import argparse
import csv

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("csv")
    ap.add_argument("png")
    ap.add_argument("--title", default="")
    ap.add_argument("--window-ms", type=float, default=10.0)
    a = ap.parse_args()
    with open(a.csv) as f:
        rows = list(csv.DictReader(f))
    if len(rows) < 2:
        raise SystemExit(f"{a.csv}: fewer than two rows")
    t = [float(r["t_s"]) for r in rows]
    cols = rows[0].keys()
    queues = [c[: -len("_queued")] for c in cols if c.endswith("_queued")]
    ports = [c[: -len("_delivered")] for c in cols if c.endswith("_delivered")]

    def series(col):
        return [int(r[col]) for r in rows]

    def rate(values, window_s):
        # Mb/s over the last window_s; a counter that went back (a 'stats
        # clear') starts again from there.
        out, j = [], 0
        for i in range(len(t)):
            while t[i] - t[j] > window_s:
                j += 1
            dt = t[i] - t[j]
            dv = values[i] - values[j]
            out.append(dv * 8 / dt / 1e6 if dt > 0 and dv >= 0 else 0.0)
        return out

    fig, (top, bottom) = plt.subplots(2, 1, figsize=(9, 6), sharex=True)
    for q in queues:
        sent = series(q + "_sent")
        if sent[-1] - sent[0] < 100_000:  # control frames only
            continue
        top.plot(t, [v / 1000 for v in series(q + "_queued")], label=q.replace("_", " "), lw=0.8)
    top.set_ylabel("queued (KB)")
    top.legend(fontsize="small", loc="upper right")
    top.grid(alpha=0.3)
    for p in ports:
        d = series(p + "_delivered")
        if d[-1] < 1_000_000:
            continue
        bottom.plot(t, rate(d, a.window_ms / 1000), label=f"from {p.replace('_', ' ')}", lw=0.8)
    bottom.set_ylabel(f"delivered (Mb/s, {a.window_ms:g} ms)")
    bottom.set_xlabel("time (s)")
    bottom.legend(fontsize="small", loc="upper right")
    bottom.grid(alpha=0.3)
    if a.title:
        fig.suptitle(a.title)
    fig.tight_layout()
    fig.savefig(a.png, dpi=110)


if __name__ == "__main__":
    main()
