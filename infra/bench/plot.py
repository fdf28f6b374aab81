"""The plot of `make bench`: throughput per stage against its goal, latency percentiles per stage
against their goal (log scale: the figures span milliseconds to minutes)."""

from pathlib import Path

import matplotlib as mpl

mpl.use("Agg")  # files only, no display
import matplotlib.pyplot as plt


def plot(
    throughput: list[tuple[str, float | None, float]],
    latency: list[tuple[str, float | None, float | None, float]],
    out: Path,
    title: str,
) -> None:
    fig, (left, right) = plt.subplots(1, 2, figsize=(15, 6))
    names = [t[0] for t in throughput]
    reached = [t[1] or 0 for t in throughput]
    left.bar(names, reached, color="#4c78a8", label="reached")
    left.scatter(
        names, [t[2] for t in throughput], marker="_", s=2000, color="#e45756", label="goal", zorder=3
    )
    for i, value in enumerate(reached):
        left.annotate(f"{value:,.0f}" if value else "not run", (i, value), ha="center", va="bottom")
    left.set_yscale("log")
    left.set_ylabel("events per second (log)")
    left.set_title("Throughput per stage")
    left.legend(loc="upper center")

    labels = [t[0] for t in latency]
    x = range(len(latency))
    width = 0.38
    p50 = [t[1] or 0 for t in latency]
    p99 = [t[2] or 0 for t in latency]
    right.bar([i - width / 2 for i in x], p50, width, label="p50", color="#72b7b2")
    right.bar([i + width / 2 for i in x], p99, width, label="p99", color="#f58518")
    right.scatter(x, [t[3] for t in latency], marker="_", s=1500, color="#e45756", label="p99 goal", zorder=3)
    for i, value in enumerate(p99):
        right.annotate(
            f"{value:,.2f} s" if value else "not run", (i + width / 2, value), ha="center", va="bottom"
        )
    right.set_xticks(list(x), labels, fontsize=8)
    right.set_yscale("log")
    right.set_ylabel("seconds (log)")
    right.set_title("Latency per stage")
    right.legend(loc="upper center")
    fig.suptitle(title)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
