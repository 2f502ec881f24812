#!/usr/bin/python3
"""Plots of the fabric scenarios (bench/fabric_scenarios.sh's CSV and time
series) as PNG files for docs/fabric-results.md. Debian's python3-matplotlib.

  scripts/fabric-plots.py [IN_DIR (default /tmp/braid-fabric)] [OUT_DIR (default docs/fabric)]
"""
import csv
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def read_csv(path):
    with open(path) as f:
        return list(csv.DictReader(f))


def by_profile(rows):
    out = {}
    for r in rows:
        out.setdefault(r["profile"], []).append(r)
    return out


def save(fig, out_dir, file_name):
    out = os.path.join(out_dir, file_name)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def finish(ax, xlabel, ylabel, title):
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend()


def fct_cdf(in_dir, out_dir, name, title):
    path = os.path.join(in_dir, name + ".csv")
    if not os.path.exists(path):
        return None
    fig, ax = plt.subplots(figsize=(6, 4))
    for profile, rows in by_profile(read_csv(path)).items():
        fcts = sorted(float(r["fct_us"]) for r in rows if r["ok"] == "1")
        if not fcts:
            continue
        ys = [(i + 1) / len(fcts) for i in range(len(fcts))]
        ax.step(fcts, ys, where="post", label=profile)
    finish(ax, "flow completion time (us)", "fraction of flows", title)
    return save(fig, out_dir, name + "-fct-cdf.png")


def series(in_dir, name):
    path = os.path.join(in_dir, name + ".ts")
    if not os.path.exists(path):
        return {}
    return by_profile(read_csv(path))


def rate_gbps(rows, column="delivered_bytes"):
    t, g = [], []
    for a, b in zip(rows, rows[1:]):
        dt = float(b["time_us"]) - float(a["time_us"])
        if dt <= 0:
            continue
        t.append(float(b["time_us"]))
        g.append((int(b[column]) - int(a[column])) * 8 / (dt * 1000))
    return t, g


def incast_plot(in_dir, out_dir, name, title):
    data = series(in_dir, name)
    if not data:
        return None
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(6, 6), sharex=True)
    for profile, rows in data.items():
        t, g = rate_gbps(rows)
        top.plot(t, g, label=profile)
        bottom.plot([float(r["time_us"]) for r in rows],
                    [int(r["queue_host0"]) / 1000 for r in rows], label=profile)
    top.set_ylabel("goodput into the receiver (Gb/s)")
    top.set_title(title)
    top.grid(alpha=0.3)
    top.legend()
    bottom.set_xlabel("time (us)")
    bottom.set_ylabel("receiver's edge port queue (KB)")
    bottom.grid(alpha=0.3)
    return save(fig, out_dir, name + "-goodput-queue.png")


def failure_plot(in_dir, out_dir, name, title, event_us):
    data = series(in_dir, name)
    if not data:
        return None
    fig, ax = plt.subplots(figsize=(6, 4))
    for profile, rows in data.items():
        t, g = rate_gbps(rows)
        ax.plot(t, g, label=profile)
    ax.axvline(event_us, color="red", linestyle="--", label="event")
    # The first milliseconds: the transfer and its disturbance. Flows that
    # end much later (in a retry limit) are in the tables.
    ax.set_xlim(0, 10 * event_us)
    finish(ax, "time (us)", "aggregate goodput (Gb/s)", title)
    return save(fig, out_dir, name + "-goodput.png")


def entropy_plot(in_dir, out_dir, name, title, event_us):
    """Per-entropy packets of the watched flows (braid_fabric --entropy-series):
    the entropies whose path crossed the first top-tier link when it failed
    against the others, per profile; prints when the failed link's entropies
    stopped carrying more than a probe per sample."""
    path = os.path.join(in_dir, name + ".es")
    if not os.path.exists(path):
        return None
    data = by_profile(read_csv(path))
    fig, axes = plt.subplots(len(data), 1, figsize=(6, 2.6 * len(data) + 0.6), sharex=True,
                             squeeze=False)
    for ax, (profile, rows) in zip(axes[:, 0], data.items()):
        times = sorted({float(r["time_us"]) for r in rows})
        at_event = min((t for t in times if t >= event_us), default=None)
        dead = {(r["flow"], r["entropy"]) for r in rows
                if float(r["time_us"]) == at_event and r["core_link"] == "0"}
        sent = {}
        for r in rows:
            sent[(float(r["time_us"]), r["flow"], r["entropy"])] = int(r["sent"])
        keys = {(r["flow"], r["entropy"]) for r in rows}
        t_axis, on_dead, on_rest, bad = [], [], [], []
        for a, b in zip(times, times[1:]):
            d = r_ = 0
            for k in keys:
                n = sent.get((b,) + k, 0) - sent.get((a,) + k, 0)
                if k in dead:
                    d += n
                else:
                    r_ += n
            t_axis.append(b)
            on_dead.append(d / (b - a))
            on_rest.append(r_ / (b - a) / max(1, len(keys) - len(dead)) * max(1, len(dead)))
            bad.append(sum(1 for r in rows if float(r["time_us"]) == b and
                           (r["flow"], r["entropy"]) in dead and r["state"] != "0"))
        ax.plot(t_axis, on_dead, color="red",
                label=f"{len(dead)} entropies over the failed link")
        ax.plot(t_axis, on_rest, color="tab:blue", alpha=0.7,
                label="as many of the others (scaled)")
        ax.axvline(event_us, color="black", linestyle="--")
        ax.set_ylabel("packets / us")
        ax.set_title(f"{profile}: {title}", fontsize=9)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
        ax.set_xlim(0, 3 * event_us)
        # Off the link: the first sample under a tenth of the rate before,
        # and what the failed link's entropies carried from then on (probes,
        # and packets the path selection tried again) while flows ran.
        before = [x for t, x in zip(t_axis, on_dead) if event_us - 200 <= t <= event_us]
        rate_before = sum(before) / max(1, len(before))
        drop = next((t for t, x in zip(t_axis, on_dead)
                     if t > event_us and x < 0.1 * rate_before), None)
        if drop is not None and rate_before > 0:
            after = [x for t, x, y in zip(t_axis, on_dead, on_rest) if t >= drop and y > 0]
            print(f"{name} {profile}: the failed link's {len(dead)} entropies fell under a tenth "
                  f"of their rate {drop - event_us:.0f} us after the failure, then carried "
                  f"{100 * sum(after) / max(1, len(after)) / rate_before:.1f}% of it; "
                  f"{max(bad) if bad else 0} of them marked bad at most")
    axes[-1, 0].set_xlabel("time (us)")
    return save(fig, out_dir, name + "-entropies.png")


def victim_plot(in_dir, out_dir):
    data = series(in_dir, "victim")
    if not data:
        return None
    fig, ax = plt.subplots(figsize=(6, 4))
    for profile, rows in data.items():
        t, g = rate_gbps(rows, "victim_bytes")
        ax.plot(t, g, label=profile + ": victim")
    finish(ax, "time (us)", "victim flow goodput (Gb/s)", "victim flow beside a 7:1 incast on its edge switch")
    return save(fig, out_dir, "victim-goodput.png")


def main():
    in_dir = sys.argv[1] if len(sys.argv) > 1 else "/tmp/braid-fabric"
    out_dir = sys.argv[2] if len(sys.argv) > 2 else "docs/fabric"
    os.makedirs(out_dir, exist_ok=True)
    made = [
        fct_cdf(in_dir, out_dir, "perm2m", "permutation, 2 MB per flow, 128 hosts"),
        fct_cdf(in_dir, out_dir, "perm16m", "permutation, 16 MB per flow, 128 hosts"),
        incast_plot(in_dir, out_dir, "incast8", "8:1 incast, 2 MB per sender"),
        incast_plot(in_dir, out_dir, "incast32", "32:1 incast, 2 MB per sender"),
        failure_plot(in_dir, out_dir, "linkdown", "16 MB permutation, a core link down at 500 us",
                     500),
        failure_plot(in_dir, out_dir, "gray", "16 MB permutation, a core link silently dropping "
                     "from 500 us", 500),
        entropy_plot(in_dir, out_dir, "gray", "entropies of flows 0-3, a core link silently "
                     "dropping from 500 us", 500),
        victim_plot(in_dir, out_dir),
        fct_cdf(in_dir, out_dir, "background0.5",
                "2 MB flows between random hosts at 50% load, 128 hosts"),
        fct_cdf(in_dir, out_dir, "background0.8",
                "2 MB flows between random hosts at 80% load, 128 hosts"),
    ]
    for m in made:
        if m:
            print(m)


if __name__ == "__main__":
    main()
