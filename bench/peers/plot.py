"""The comparison plot of bench/peers/compare.py and bench/peers/netbed/report.py."""


def plot_bw_latency(path, suptitle, series):
    """Writes `path` (PNG): busbw and time per operation against message size,
    log scales, one line per system. `series`: {system: {bytes: (time_us, busbw)}}.
    Returns False when matplotlib is missing (bench/peers/setup.sh installs it)."""
    try:
        import matplotlib
    except ImportError:
        return False
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(13, 5))
    for name, points in series.items():
        xs = sorted(b for b in points if b > 0)
        if not xs:
            continue
        ax1.plot(xs, [max(points[b][1], 1e-6) for b in xs], marker="o", ms=3, label=name)
        ax2.plot(xs, [points[b][0] for b in xs], marker="o", ms=3, label=name)
    for ax, yl in ((ax1, "bus bandwidth (GB/s)"), (ax2, "time per op (us)")):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("message size (bytes)")
        ax.set_ylabel(yl)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
    ax1.set_title("busbw vs size")
    ax2.set_title("latency vs size")
    fig.suptitle(suptitle, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True
