#!/usr/bin/env python3
"""Renders results.json of `bench suite` into a Markdown report and PNG plots.

usage: report.py RESULTS_JSON --md OUT.md --img IMG_DIR [--notes NOTES.md]
"""
import argparse
import json
import os
import statistics
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

ORDER = ["kafka-floor-linger0", "kafka-floor-linger5", "kafka-floor-txn", "pg_recvlogical", "outbox-relay", "outbox-relay-b",
         "outbox-relay-fenced", "outbox-relay-eos", "outbox-relay-eos-b", "outbox-relay-messages",
         "debezium-default", "debezium-tuned", "outboxx", "go-pq-cdc-kafka", "polling"]
COLORS = {
    "pg_recvlogical": "#888888",
    "outbox-relay": "#1f77b4",
    "outbox-relay-fenced": "#17becf",
    "outbox-relay-eos": "#9467bd",
    "outbox-relay-b": "#aec7e8",
    "outbox-relay-eos-b": "#c5b0d5",
    "outbox-relay-messages": "#8c564b",
    "kafka-floor-linger0": "#bcbd22",
    "kafka-floor-linger5": "#dbdb8d",
    "kafka-floor-txn": "#8c564b",
    "debezium-default": "#d62728",
    "debezium-tuned": "#ff7f0e",
    "outboxx": "#e377c2",
    "go-pq-cdc-kafka": "#7f7f7f",
    "polling": "#2ca02c",
}


def shape_name(c):
    size = c["payload"]
    p = f"~{size // 1024} KB" if size > 1000 else f"~{size} B"
    rows = c["txn_rows"]
    if rows >= c["events"]:
        t = "one transaction"
    elif rows > 1:
        t = f"{rows:,}-row txns"
    else:
        t = "single-row txns"
    name = f"{c['events']:,} events, {t}, {p}"
    # Partitions and outbox tables, when not the defaults (3 and 1; runs before they were recorded)
    if c.get("partitions", 3) != 3:
        name += f", {c['partitions']} partition{'s' if c['partitions'] > 1 else ''}"
    if c.get("tables", 1) != 1:
        name += f", {c['tables']} outbox tables"
    return name


def shape_key(c):
    return (c["txn_rows"], c["payload"], c["events"], c.get("partitions", 3), c.get("tables", 1))


def fmt(x, nd=0):
    if x is None:
        return "–"
    if isinstance(x, float) and nd == 0:
        return f"{x:,.0f}"
    return f"{x:,.{nd}f}"


def ratio(a, b, nd=2):
    if a is None or b is None or b == 0:
        return "–"
    return f"{a / b:.{nd}f}×"


def others_cpu(c):
    return max(0.0, c["machine_cpu_s"] - c["cpu_s"] - c["pg_cpu_s"] - c["kafka_cpu_s"] - c["bench_cpu_s"])


def window_s(c):
    return c["total_s"] if c["workload"] == "catchup" else c["seconds"]


def sortkey(c):
    return ORDER.index(c["system"]) if c["system"] in ORDER else 99


def plot_catchup(results, img):
    files = []
    groups = {}
    for c in results["catchup"]:
        groups.setdefault(shape_key(c), []).append(c)
    if not groups:
        return files
    # 1. bar chart of rates
    fig, axes = plt.subplots(1, len(groups), figsize=(5 * len(groups), 4), squeeze=False)
    for ax, (k, runs) in zip(axes[0], sorted(groups.items())):
        runs = representative(runs)
        names = [r["system"] for r in runs]
        vals = [r["rate_from_start"] for r in runs]
        vals2 = [r["rate_from_first"] for r in runs]
        xs = range(len(runs))
        ax.bar([x - 0.2 for x in xs], vals, 0.4, color=[COLORS.get(n, "k") for n in names], label="from process start")
        ax.bar([x + 0.2 for x in xs], vals2, 0.4, color=[COLORS.get(n, "k") for n in names], alpha=0.45,
               label="from first record")
        ax.set_xticks(list(xs))
        ax.set_xticklabels(names, rotation=30, ha="right", fontsize=8)
        ax.set_title(shape_name(runs[0]), fontsize=9)
        ax.set_ylabel("events/s into Kafka (pg_recvlogical: decoded)")
        ax.grid(axis="y", alpha=0.3)
    axes[0][0].legend(fontsize=7)
    fig.suptitle("Catch-up: drain rate of the same backlog")
    fig.tight_layout()
    f = "catchup_rates.png"
    fig.savefig(os.path.join(img, f), dpi=110)
    plt.close(fig)
    files.append(f)
    # 2. throughput over time
    fig, axes = plt.subplots(1, len(groups), figsize=(5 * len(groups), 4), squeeze=False)
    for ax, (k, runs) in zip(axes[0], sorted(groups.items())):
        runs = representative(runs)
        for r in runs:
            tl = r.get("timeline") or []
            if len(tl) < 3:
                continue
            # events/s over 0.5 s windows
            xs, ys = [], []
            j = 0
            for i in range(len(tl)):
                while tl[i][0] - tl[j][0] > 0.5:
                    j += 1
                if i > j and tl[i][0] > tl[j][0]:
                    xs.append(tl[i][0])
                    ys.append((tl[i][1] - tl[j][1]) / (tl[i][0] - tl[j][0]))
            ax.plot(xs, ys, label=r["system"], color=COLORS.get(r["system"], "k"), lw=1)
        for r in runs:
            if r["system"] == "pg_recvlogical":
                ax.axhline(r["rate_from_start"], color=COLORS["pg_recvlogical"], ls="--", lw=1,
                           label="pg_recvlogical (average)")
        ax.set_title(shape_name(runs[0]), fontsize=9)
        ax.set_xlabel("seconds since the relay process started")
        ax.set_ylabel("events/s reaching Kafka (0.5 s windows)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle("Catch-up: throughput over time")
    fig.tight_layout()
    f = "catchup_timeline.png"
    fig.savefig(os.path.join(img, f), dpi=110)
    plt.close(fig)
    files.append(f)
    return files


def steady_key(c):
    return (c["rate"], c["payload"])


def steady_name(k):
    return f"{k[0]:,.0f} events/s, {'~4 KB' if k[1] > 1000 else '~200 B'}"


def plot_steady(results, img):
    files = []
    groups = {}
    for c in results["steady"]:
        groups.setdefault(steady_key(c), []).append(c)
    if not groups:
        return files
    # latency distribution (percentile spectrum, log x on 1/(1-q))
    fig, axes = plt.subplots(1, len(groups), figsize=(5 * len(groups), 4), squeeze=False)
    for ax, (k, runs) in zip(axes[0], sorted(groups.items())):
        for r in sorted(runs, key=sortkey):
            sp = r["latency_payload"].get("spectrum") or []
            pts = [(1 / (1 - q), v) for q, v in sp if q < 1]
            if not pts:
                continue
            ax.plot([p[0] for p in pts], [p[1] for p in pts], label=r["system"],
                    color=COLORS.get(r["system"], "k"))
            if r.get("latency_commit") and r["latency_commit"].get("spectrum"):
                pc = [(1 / (1 - q), v) for q, v in r["latency_commit"]["spectrum"] if q < 1]
                ax.plot([p[0] for p in pc], [p[1] for p in pc], ls=":", color=COLORS.get(r["system"], "k"),
                        label=r["system"] + " (commit-time header)")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ticks = [1, 2, 10, 100, 1000, 10000, 100000]
        ax.set_xticks(ticks)
        ax.set_xticklabels(["0", "50", "90", "99", "99.9", "99.99", "99.999"])
        ax.set_xlabel("percentile")
        ax.set_ylabel("commit-to-consumer latency, ms")
        ax.set_title(steady_name(k), fontsize=9)
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=7)
    fig.suptitle("Steady rate: latency distribution (writer clock → consumer clock)")
    fig.tight_layout()
    f = "steady_latency.png"
    fig.savefig(os.path.join(img, f), dpi=110)
    plt.close(fig)
    files.append(f)
    # per-second timeline
    fig, axes = plt.subplots(2, len(groups), figsize=(5 * len(groups), 6), squeeze=False, sharex="col")
    for col, (k, runs) in enumerate(sorted(groups.items())):
        for r in sorted(runs, key=sortkey):
            ps = r.get("per_second") or []
            axes[0][col].plot([p["t"] for p in ps], [p["received"] for p in ps], label=r["system"],
                              color=COLORS.get(r["system"], "k"), lw=1)
            axes[1][col].plot([p["t"] for p in ps], [max(p["p99_ms"], 0.01) for p in ps], label=r["system"],
                              color=COLORS.get(r["system"], "k"), lw=1)
        axes[0][col].set_title(steady_name(k), fontsize=9)
        axes[0][col].set_ylabel("records received / s")
        axes[1][col].set_ylabel("p99 latency in that second, ms")
        axes[1][col].set_yscale("log")
        axes[1][col].set_xlabel("seconds since the writer started")
        for a in (axes[0][col], axes[1][col]):
            a.grid(alpha=0.3)
        axes[0][col].legend(fontsize=7)
    fig.suptitle("Steady rate: throughput and latency over time")
    fig.tight_layout()
    f = "steady_timeline.png"
    fig.savefig(os.path.join(img, f), dpi=110)
    plt.close(fig)
    files.append(f)
    return files


def plot_cost(results, img):
    rows = [c for c in results["steady"] if c["rate"] >= 10000 and c["payload"] < 1000]
    if not rows:
        return []
    rows = sorted(rows, key=sortkey)
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    names = [r["system"] for r in rows]
    cols = [COLORS.get(n, "k") for n in names]
    axes[0].bar(names, [r["cpu_s_per_million"] for r in rows], color=cols)
    axes[0].set_ylabel("CPU seconds per million events")
    axes[0].set_title("CPU at 10,000 events/s (relay process only)", fontsize=9)
    axes[1].bar(names, [r["peak_rss_kb"] / 1024 for r in rows], color=cols)
    axes[1].set_ylabel("peak RSS (VmHWM), MiB")
    axes[1].set_yscale("log")
    axes[1].set_title("Peak resident memory", fontsize=9)
    for a in axes:
        a.tick_params(axis="x", rotation=30, labelsize=8)
        a.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    f = "cost.png"
    fig.savefig(os.path.join(img, f), dpi=110)
    plt.close(fig)
    return [f]


def representative(runs):
    """One run per system: the median by rate_from_start (repeated drains), with the spread."""
    by = {}
    for r in runs:
        by.setdefault(r["system"], []).append(r)
    out = []
    for sysname, rs in by.items():
        rs = sorted(rs, key=lambda r: r["rate_from_start"])
        m = dict(rs[(len(rs) - 1) // 2])
        m["_n"] = len(rs)
        m["_rates"] = [r["rate_from_start"] for r in rs]
        m["_others"] = [r for r in rs]
        out.append(m)
    return sorted(out, key=sortkey)


def busiest(r):
    """The busiest thread's CPU µs per event and its name, or – where the run did not record it."""
    if r.get("busiest_thread_cpu_s") is None:
        return "–"
    return f"{r['busiest_thread_cpu_s'] / r['events'] * 1e6:.1f} ({r['busiest_thread']})"


def catchup_reps(results):
    """All catch-up runs of the run, reduced to one (median) per system and shape."""
    groups = {}
    for c in results["catchup"]:
        groups.setdefault(shape_key(c), []).append(c)
    red = []
    for k, runs in groups.items():
        red += representative(runs)
    return red


def find(lst, **kw):
    for c in lst:
        if all(c.get(k) == v for k, v in kw.items()):
            return c
    return None


def md_spills(runs, out):
    """One line per drain whose slot spilled the decoded transactions to disk."""
    for r in runs:
        st = r.get("slot_stats") or {}
        if st.get("spill_bytes", 0) > 0:
            out.append(f"- {r['system']}'s slot spilled {st['spill_bytes'] / 2**20:,.0f} MiB to disk in "
                       f"{st['spill_count']:,} spills of {st['spill_txns']:,} transaction(s) "
                       f"(logical_decoding_work_mem {st['work_mem']})")


def md_catchup(results, out):
    groups = {}
    for c in results["catchup"]:
        groups.setdefault(shape_key(c), []).append(c)
    if not groups:
        return
    out.append("## Catch-up\n")
    out.append(
        "A backlog written while every relay was stopped (each had its slot, and each Debezium had committed an "
        "offset, before the first row), then drained by one system at a time. *Rate from start*: events ÷ (process "
        "start → last record in Kafka); *from first record*: events ÷ (first → last record), which leaves out "
        "start-up (the JVM and Connect for Debezium). pg_recvlogical has no observable first record: both of its "
        "rates run from process start to its exit at the backlog's end LSN. CPU: the relay process from its start to "
        "the last record (*CPU/event* divides that by the events); walsender: the PostgreSQL process decoding for "
        "that system; *other load*: busy CPU of the machine in the same window that belongs to none of the measured "
        "processes (other users of this shared machine; noise).\n")
    for k, runs in sorted(groups.items()):
        runs = representative(runs)
        out.append(f"### {shape_name(runs[0])}\n")
        out.append(f"Backlog written in {runs[0]['backlog_write_s']:.1f} s. Repeated drains: the median is shown (of two: the slower), "
                   "all of them, sorted, in *all drains*.\n")
        out.append("| system | rate from start (ev/s) | all drains (ev/s) | rate from first record (ev/s) | start-up s | "
                   "total s | CPU s | CPU µs/event | busiest thread µs/event | peak RSS MiB | walsender CPU s | "
                   "Kafka broker CPU s | other load (cores) |")
        out.append("|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        for r in runs:
            flag = "" if r["completed"] else " ⚠ incomplete"
            spread = ", ".join(f"{x / 1000:.1f}k" for x in r["_rates"]) if r["_n"] > 1 else "–"
            out.append(
                f"| {r['system']}{flag} | {fmt(r['rate_from_start'])} | {spread} | {fmt(r['rate_from_first'])} | "
                f"{r['startup_s']:.2f} | {r['total_s']:.2f} | {r['cpu_s']:.2f} | "
                f"{r['cpu_s'] / r['events'] * 1e6:.1f} | {busiest(r)} | {r['peak_rss_kb'] / 1024:.0f} | "
                f"{'–' if r['system'] == 'polling' else format(r['walsender_cpu_s'], '.2f')} | "
                f"{r['kafka_cpu_s']:.2f} | {others_cpu(r) / max(r['total_s'], 1e-3):.2f} |")
        relay = find(runs, system="outbox-relay")
        if relay:
            out.append("")
            parts = []
            for other, field in [("pg_recvlogical", "rate_from_start"), ("debezium-tuned", "rate_from_first"),
                                 ("debezium-default", "rate_from_first"), ("polling", "rate_from_first")]:
                o = find(runs, system=other)
                if o:
                    if field == "rate_from_start":
                        parts.append(f"vs {other}: **{ratio(relay['rate_from_start'], o['rate_from_start'])}** "
                                     f"(both from process start)")
                    else:
                        parts.append(f"vs {other}: **{ratio(relay['rate_from_start'], o[field])}** (outbox-relay "
                                     f"from start, {other} from its first record); CPU/event "
                                     f"{ratio(relay['cpu_s'] / relay['events'], o['cpu_drain_s'] / o['events'])} "
                                     f"(its drain-window CPU); peak RSS "
                                     f"{ratio(relay['peak_rss_kb'], o['peak_rss_kb'], 3)}")
            if parts:
                out.append("outbox-relay " + "; ".join(parts) + ".\n")
        for r in runs:
            if r.get("note"):
                out.append(f"- {r['system']}: {r['note']}")
        md_spills(runs, out)
        out.append("")


def md_steady(results, out):
    groups = {}
    for c in results["steady"]:
        groups.setdefault(steady_key(c), []).append(c)
    if not groups:
        return
    out.append("## Steady rate\n")
    out.append(
        "Open-loop writer: single-row transactions at a fixed rate over 4 pipelined connections; every payload "
        "carries `ts`, the writer's wall clock (µs) taken just before the INSERT is handed to its connection. The "
        "independent consumer (librdkafka, no group, all partitions from the beginning) stamps each record on "
        "arrival with the same machine's wall clock: **latency = consumer clock − writer clock**, measured for every "
        "system the same way (Debezium carries no commit time). For outbox-relay the consumer also reads the "
        "`outbox-relay.commit-time-us` header (PostgreSQL's commit timestamp, same clock): *commit p99* below. The two "
        "differ by the INSERT and COMMIT round trip (plus any queueing in the writer) and agree within a fraction "
        "of a millisecond when the writer keeps up. Records written during the warm-up are not counted. CPU: relay "
        "process over the measured window; *CPU s per M events* divides by the events measured. *All PostgreSQL* "
        "includes the writer's four backends (the same load for every system): the difference between rows is "
        "what each relay costs the database (the walsender, or the polling relay's queries). *pg_recvlogical* is the "
        "database's floor: it streams the same rows from a slot of its own to a pipe the harness reads, and its "
        "latency is taken at that output (writer clock to the moment the row leaves the walsender and reaches a "
        "client that does nothing with it); it produces nothing to Kafka.\n")
    for k, runs in sorted(groups.items()):
        runs = sorted(runs, key=sortkey)
        r0 = runs[0]
        out.append(f"### {steady_name(k)} ({r0['seconds']:.0f} s measured after {r0['warmup_s']:.0f} s warm-up)\n")
        out.append("| system | p50 ms | p90 ms | p99 ms | p99.9 ms | max ms | commit p99 ms | CPU s per M events | "
                   "peak RSS MiB | walsender CPU s | all PostgreSQL CPU s | writer achieved ev/s | received / sent | "
                   "other load (cores) |")
        out.append("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        for r in runs:
            l = r["latency_payload"]
            cm = r.get("latency_commit") or {}
            out.append(
                f"| {r['system']} | {l['p50_ms']:.1f} | {l['p90_ms']:.1f} | {l['p99_ms']:.1f} | {l['p999_ms']:.1f} | "
                f"{l['max_ms']:.1f} | {fmt(cm.get('p99_ms'), 1) if cm else '–'} | {r['cpu_s_per_million']:.1f} | "
                f"{r['peak_rss_kb'] / 1024:.0f} | "
                f"{'–' if r['system'] == 'polling' else format(r['walsender_cpu_s'], '.2f')} | "
                f"{r['pg_cpu_s']:.1f} | {r['load']['achieved_rate']:,.0f} | "
                f"{r['received']:,} / {r['load']['sent']:,} | {others_cpu(r) / r['seconds']:.2f} |")
        relay = find(runs, system="outbox-relay")
        if relay:
            parts = []
            for other in ["debezium-default", "debezium-tuned", "polling"]:
                o = find(runs, system=other)
                if o:
                    parts.append(
                        f"vs {other}: p99 {ratio(relay['latency_payload']['p99_ms'], o['latency_payload']['p99_ms'], 3)}, "
                        f"CPU/event {ratio(relay['cpu_s_per_million'], o['cpu_s_per_million'], 3)}, "
                        f"peak RSS {ratio(relay['peak_rss_kb'], o['peak_rss_kb'], 3)}")
            if parts:
                out.append("\noutbox-relay " + "; ".join(parts) + ".\n")
        for r in runs:
            if r.get("note"):
                out.append(f"- {r['system']}: {r['note']}")
        md_spills(runs, out)
        out.append("")


def md_saturation(results, out):
    sats = results.get("saturation", [])
    if not sats:
        return
    out.append("## Saturation\n")
    out.append(
        "The writer offers increasing rates (single-row transactions, ~200 B) for "
        f"{results['plan']['saturation_step_s']:.0f} s each while one system runs: outbox-relay, then pg_recvlogical "
        "(the walsender alone, to /dev/null). *Written*: what the writer achieved; *walsender sent*: events/s the "
        "walsender shipped (WAL sent ÷ WAL written per event); *in Kafka*: what reached Kafka; *unsent WAL*: written "
        "but not yet decoded and sent at the end of the step. CPU in cores (1.0 = one core; the machine has 2.0) "
        "over the step.\n")
    out.append("| system | offered ev/s | written ev/s | walsender sent ev/s | in Kafka ev/s | unsent WAL at end MB | "
               "relay process | walsender | all PostgreSQL | Kafka broker | writer+harness | machine |")
    out.append("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for s_ in sorted(sats, key=sortkey):
        for st in s_["steps"]:
            kafka = st.get("relayed_rate")
            kafka = "–" if kafka is None or kafka != kafka else f"{kafka:,.0f}"
            out.append(
                f"| {s_['system']} | {st['target_rate']:,.0f} | {st['load']['achieved_rate']:,.0f} | "
                f"{st.get('decoded_rate', float('nan')):,.0f} | {kafka} | "
                f"{st.get('unsent_wal_bytes_end', 0) / 1e6:.1f} | {st['relay_cpu_util']:.2f} | "
                f"{st['walsender_cpu_util']:.2f} | {st['pg_cpu_util']:.2f} | {st['kafka_cpu_util']:.2f} | "
                f"{st['bench_cpu_util']:.2f} | {st['machine_cpu_util']:.2f} |")
    out.append("")


def md_burst(results, out):
    runs = results.get("burst", [])
    if not runs:
        return
    r0 = runs[0]
    out.append("## Burst\n")
    out.append(
        f"A caught-up, idle system; then {r0['rate'] * r0['seconds']:,.0f} single-row transactions (~200 B) offered at "
        f"{r0['rate']:,.0f} events/s for {r0['seconds']:.0f} s by the steady writer (no warm-up), above what the "
        "writer sustains on two cores (*writer achieved*). Latency: writer to consumer, every event of the burst; "
        "*drained s*: from the burst's start to the end of the second in which the consumer received the last "
        "record (1 s resolution).\n")
    out.append("| system | p50 ms | p90 ms | p99 ms | max ms | drained s | peak RSS MiB | "
               "writer achieved ev/s | received / sent |")
    out.append("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in sorted(runs, key=sortkey):
        lat = r["latency_payload"]
        per = r.get("per_second") or []
        drained = max((p["t"] + 1 for p in per if p["received"]), default=0)
        out.append(
            f"| {r['system']} | {fmt(lat['p50_ms'], 1)} | {fmt(lat['p90_ms'], 1)} | {fmt(lat['p99_ms'], 1)} | "
            f"{fmt(lat['max_ms'], 1)} | {drained} | "
            f"{r['peak_rss_kb'] / 1024:.0f} | {r['load']['achieved_rate']:,.0f} | "
            f"{r['received']:,} / {r['load']['sent']:,} |")
    out.append("")


def md_crash(results, out):
    runs = results.get("crash", [])
    if not runs:
        return
    r0 = runs[0]
    out.append("## Crash recovery\n")
    out.append(
        f"A steady writer (single-row transactions, ~200 B, {r0['rate']:,.0f} events/s for {r0['seconds']:.0f} s) "
        "while one system runs; the system is killed with SIGKILL about "
        f"{r0['killed_at_s']:.0f} s in and started again {r0['restarted_at_s'] - r0['killed_at_s']:.0f} s later, "
        "on the same slot, config, topic and (Debezium) offsets file. Afterwards the whole topic is read "
        "(read committed) and every event id the outbox table holds is looked for: *lost* = committed rows "
        "with no record, *duplicated* = records beyond the first of their id (a replay after the restart), "
        "*foreign* = ids the table does not hold. *Outage events*: written while the system was down; their "
        "latency (writer to consumer) is the outage plus the restart plus the catch-up. *Fresh after*: "
        "seconds from the restart until no record arrived more than 1 s after it was written "
        "(a replay of old records counts as stale).\n")
    out.append("| system | committed | records in Kafka | lost | duplicated | foreign | outage events | "
               "outage p50 ms | outage max ms | fresh after restart s | peak RSS after restart MiB | note |")
    out.append("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    for r in sorted(runs, key=sortkey):
        out.append(
            f"| {r['system']} | {r['committed']:,} | {r['records']:,} | **{r['lost']:,}** | {r['duplicated']:,} | "
            f"{r['foreign']:,} | {r['outage_events']:,} | {r['outage_p50_ms']:,.0f} | {r['outage_max_ms']:,.0f} | "
            f"{r['fresh_after_restart_s']:.0f} | {r['peak_rss_kb_after_restart'] / 1024:.0f} | {r.get('note') or ''} |")
    out.append("")


RELAY_MODES = ["outbox-relay", "outbox-relay-fenced", "outbox-relay-eos"]


def typical_p99(r):
    """Median of the per-second p99s of the measured window: the typical second, which the
    spikes of a shared machine move less than the window's p99."""
    ps = [p["p99_ms"] for p in r.get("per_second") or []
          if p["received"] and r["warmup_s"] <= p["t"] < r["warmup_s"] + r["seconds"]]
    return statistics.median(ps) if ps else None


def md_exactly_once(results, out):
    """The three delivery modes of outbox-relay side by side, from this run (issue #11: exactly-once
    p99 at most 2× at-least-once)."""
    st = [c for c in results["steady"] if c["system"] in RELAY_MODES]
    cu = [c for c in catchup_reps(results) if c["system"] in RELAY_MODES]
    if not any(c["system"] == "outbox-relay-eos" for c in st + cu):
        return
    out.append("## Exactly-once (`relay.delivery = \"exactly-once\"`)\n")
    out.append(
        "outbox-relay (at-least-once, the default), outbox-relay-fenced (`kafka.transactional_id`: Kafka "
        "transactions, committed every `transaction_interval_ms` and whenever the stream goes quiet) and "
        "outbox-relay-eos (the same plus `relay.delivery = \"exactly-once\"`: a checkpoint record, in a checkpoint "
        "topic of its own per run, ends every Kafka transaction), from the tables above. The latency consumer reads "
        "with `isolation.level=read_committed`: a record counts when its transaction commits. *eos / at-least-once*: "
        "outbox-relay-eos divided by outbox-relay.\n")
    out.append("| workload | figure | outbox-relay | outbox-relay-fenced | outbox-relay-eos | eos / at-least-once |")
    out.append("|---|---|---:|---:|---:|---:|")
    targets = []
    for k in sorted({steady_key(c) for c in st}):
        runs = {c["system"]: c for c in st if steady_key(c) == k}
        for label, get, nd in [("p50 ms", lambda r: r["latency_payload"]["p50_ms"], 1),
                               ("p99 ms", lambda r: r["latency_payload"]["p99_ms"], 1),
                               ("p99.9 ms", lambda r: r["latency_payload"]["p999_ms"], 1),
                               ("median of the per-second p99s, ms", typical_p99, 1),
                               ("CPU s per M events", lambda r: r["cpu_s_per_million"], 1),
                               ("Kafka broker CPU (cores)", lambda r: r["kafka_cpu_s"] / r["seconds"], 2),
                               ("other load (cores)", lambda r: others_cpu(r) / r["seconds"], 2)]:
            vals = [get(runs[m]) if m in runs else None for m in RELAY_MODES]
            cells = " | ".join(fmt(v, nd) for v in vals)
            q = ratio(vals[2], vals[0]) if label != "other load (cores)" else ""
            out.append(f"| steady {steady_name(k)} | {label} | {cells} | {q} |")
        a, e = runs.get("outbox-relay"), runs.get("outbox-relay-eos")
        if a and e:
            v = e["latency_payload"]["p99_ms"] / a["latency_payload"]["p99_ms"]
            targets.append((f"exactly-once p99 ≤ 2× at-least-once p99 at {steady_name(k)}", f"{v:.2f}×", v <= 2))
    for k in sorted({shape_key(c) for c in cu}):
        runs = {c["system"]: c for c in cu if shape_key(c) == k}
        name = f"catch-up {shape_name(next(iter(runs.values())))}"
        vals = [runs[m]["rate_from_start"] if m in runs else None for m in RELAY_MODES]
        drains = " | ".join(", ".join(f"{x / 1000:.1f}k" for x in runs[m]["_rates"]) if m in runs else "–"
                            for m in RELAY_MODES)
        out.append(f"| {name} | ev/s from start (median) | {' | '.join(fmt(v) for v in vals)} | "
                   f"{ratio(vals[2], vals[0])} |")
        out.append(f"| {name} | all drains | {drains} | |")
        vals = [runs[m]["cpu_s"] / runs[m]["events"] * 1e6 if m in runs else None for m in RELAY_MODES]
        out.append(f"| {name} | CPU µs/event | {' | '.join(fmt(v, 1) for v in vals)} | {ratio(vals[2], vals[0])} |")
    out.append("")
    if targets:
        out.append("| target | measured | met |")
        out.append("|---|---:|:---:|")
        for t, m, ok in targets:
            out.append(f"| {t} | {m} | {'yes' if ok else '**no**'} |")
        out.append("")


def md_messages(results, out):
    """The table-less outbox beside table rows, from this run (issue #12): the same writer, rate
    and payloads, once as outbox rows and once as transactional logical messages."""
    st = [c for c in results["steady"] if c["system"] in ("outbox-relay", "outbox-relay-messages")]
    if not any(c["system"] == "outbox-relay-messages" for c in st):
        return
    out.append("## Table-less outbox (`[[message]]`) beside outbox rows\n")
    out.append(
        "outbox-relay reading outbox rows (the writers INSERT into `public.outbox`) and outbox-relay-messages "
        "(the writers call `pg_logical_emit_message(true, 'outbox', …)` with the same Debezium envelope and payload; "
        "no table is written), one after the other in this run. *messages / rows*: the second divided by the first.\n")
    out.append("| workload | figure | rows (outbox-relay) | messages (outbox-relay-messages) | messages / rows |")
    out.append("|---|---|---:|---:|---:|")
    for k in sorted({steady_key(c) for c in st}):
        runs = {c["system"]: c for c in st if steady_key(c) == k}
        for label, get, nd in [("p50 ms", lambda r: r["latency_payload"]["p50_ms"], 1),
                               ("p99 ms", lambda r: r["latency_payload"]["p99_ms"], 1),
                               ("median of the per-second p99s, ms", typical_p99, 1),
                               ("relay CPU s per M events", lambda r: r["cpu_s_per_million"], 1),
                               ("walsender CPU (cores)", lambda r: r["walsender_cpu_s"] / r["seconds"], 3),
                               ("PostgreSQL CPU (cores)", lambda r: r["pg_cpu_s"] / r["seconds"], 2)]:
            vals = [get(runs[m]) if m in runs else None for m in ("outbox-relay", "outbox-relay-messages")]
            out.append(f"| steady {steady_name(k)} | {label} | {fmt(vals[0], nd)} | {fmt(vals[1], nd)} | "
                       f"{ratio(vals[1], vals[0])} |")
    out.append("")


FLOORS = ["kafka-floor-linger0", "kafka-floor-linger5"]


def md_floor(results, out):
    """What each system adds to Kafka's own latency (issue #15): its p99 minus the better p99 of
    the two bare producers (linger 0 and linger 5) that wrote the same records at the same rate
    to the same consumer in this run. Beside it, the database's floor: pg_recvlogical reading the
    same rows from its own slot, no Kafka (the walsender's share, which every log-based relay
    pays before it can produce anything)."""
    st = results["steady"]
    if not any(c["system"] in FLOORS for c in st):
        return
    out.append("## Latency over Kafka's floor\n")
    out.append(
        "The floor: a bare producer in the harness (acks=all, idempotent, lz4) writing the same records at the "
        "same rate to the same topic layout and latency consumer, with linger 0 and with linger 5; the better p99 "
        "of the two is the floor. *over floor*: the system's p99 minus the floor's, this run. *database floor*: "
        "pg_recvlogical streaming the same rows from a slot of its own at the same rate, writer to "
        "pg_recvlogical's output, nothing produced (the walsender's share of every log-based system's latency). "
        "*over both*: the p99 minus the two floors' p99s (a rough figure: percentiles do not add, but a relay "
        "that adds nothing of its own cannot do much better than the two in a row).\n")
    out.append("| workload | system | p50 ms | p99 ms | floor p99 ms | over floor (p99) ms | database floor p99 ms "
               "| over both ms | target | met |")
    out.append("|---|---|---:|---:|---:|---:|---:|---:|---:|:---:|")
    for k in sorted({steady_key(c) for c in st}):
        runs = {c["system"]: c for c in st if steady_key(c) == k}
        floors = [runs[f]["latency_payload"]["p99_ms"] for f in FLOORS if f in runs]
        if not floors:
            continue
        floor = min(floors)
        db = runs.get("pg_recvlogical")
        db_p99 = db["latency_payload"]["p99_ms"] if db else None
        rate = next(iter(runs.values()))["rate"]
        for name in ORDER:
            if name not in runs:
                continue
            lat = runs[name]["latency_payload"]
            if name == "pg_recvlogical":
                out.append(f"| steady {steady_name(k)} | {name} (database floor) | {lat['p50_ms']:.1f} | "
                           f"{lat['p99_ms']:.1f} | | | {lat['p99_ms']:.1f} | | | |")
                continue
            over = lat["p99_ms"] - floor
            both = ""
            if db_p99 is not None and name not in FLOORS and name != "kafka-floor-txn":
                both = f"{lat['p99_ms'] - floor - db_p99:+.1f}"
            target, met = "", ""
            if name == "outbox-relay" and rate in (1000, 10000):
                t = 5 if rate == 1000 else 10
                target, met = f"≤ {t}", ("yes" if over <= t else "**no**")
            out.append(f"| steady {steady_name(k)} | {name} | {lat['p50_ms']:.1f} | {lat['p99_ms']:.1f} | "
                       f"{floor:.1f} | {over:+.1f} | {'' if db_p99 is None else f'{db_p99:.1f}'} | {both} | "
                       f"{target} | {met} |")
    out.append("")


def md_stages(results, out):
    """Where the relay's latency goes (issue #15's profile of a miss): each record's writer to
    consumer time cut at PostgreSQL's commit (the commit-time header) and at the producer's
    hand-off (the record's Kafka timestamp, which librdkafka stamps when `produce` is called)."""
    rows = [c for c in results["steady"] if c.get("stages")]
    if not rows:
        return
    out.append("## Where the relay's latency goes\n")
    out.append(
        "Each outbox-relay record's writer-to-consumer time in three stages: *to commit* (writer's timestamp to "
        "PostgreSQL's commit, from the commit-time header), *to hand-off* (commit to the relay's `produce` call, "
        "from the record's Kafka timestamp, which librdkafka stamps then with a 1 ms resolution: the walsender's "
        "decoding and sending, the relay's reading and routing, any hold before producing), *to consumer* "
        "(hand-off to the latency consumer: librdkafka's batching, the broker, a Kafka transaction's commit, the "
        "consumer's fetch). p50 and p99 of each stage over all records, and its mean over the slowest 1 % "
        "(by writer-to-consumer time), with how many of those spent most of their time there. A row "
        "marked *cut at broker* comes from a run whose topics stamp the broker's append time instead "
        "(`BENCH_TIMESTAMP_TYPE=LogAppendTime`): its middle stage ends at the broker.\n")
    out.append("| workload | system | records | to commit p50 / p99 / slowest 1 % ms | to hand-off p50 / p99 / "
               "slowest 1 % ms | to consumer p50 / p99 / slowest 1 % ms | slowest 1 %: mostly in commit / hand-off "
               "/ consumer |")
    out.append("|---|---|---:|---:|---:|---:|---:|")
    for c in sorted(rows, key=lambda c: (steady_key(c), sortkey(c))):
        b = c["stages"]

        def cell(x):
            return f"{x['p50_ms']:.1f} / {x['p99_ms']:.1f} / {x['tail_mean_ms']:.1f}"

        system = c["system"] + (" (cut at broker)" if b.get("cut") == "broker" else "")
        out.append(f"| steady {steady_name(steady_key(c))} | {system} | {b['count']:,} | "
                   f"{cell(b['to_commit'])} | {cell(b['to_produce'])} | {cell(b['to_consumer'])} | "
                   f"{b['to_commit']['tail_dominant']} / {b['to_produce']['tail_dominant']} / "
                   f"{b['to_consumer']['tail_dominant']} of {b['tail_count']} |")
    out.append("")


def md_targets(results, out, title="## Targets of issue 5 (this run)"):
    cu = catchup_reps(results)
    st = results["steady"]
    rows = []

    def g(lst, **kw):
        return find(lst, **kw)

    for rows_, name in [(1000, "1,000-row"), (1, "single-row")]:
        r = g(cu, system="outbox-relay", txn_rows=rows_, payload=200)
        b = g(cu, system="pg_recvlogical", txn_rows=rows_, payload=200)
        if r and b:
            v = r["rate_from_start"] / b["rate_from_start"]
            rows.append((f"catch-up ≥ 85% of pg_recvlogical ({name})", f"{v * 100:.0f}%", v >= 0.85))
    for rows_, name in [(1000, "1,000-row"), (1, "single-row")]:
        r = g(cu, system="outbox-relay", txn_rows=rows_, payload=200)
        b = g(cu, system="debezium-tuned", txn_rows=rows_, payload=200)
        if r and b:
            v = r["rate_from_start"] / b["rate_from_first"]
            rows.append((f"catch-up ≥ 3× Debezium tuned ({name})", f"{v:.2f}×", v >= 3))
    for rows_, name in [(1000, "1,000-row"), (1, "single-row")]:
        r = g(cu, system="outbox-relay", txn_rows=rows_, payload=200)
        for dn in ["debezium-default", "debezium-tuned"]:
            d = g(cu, system=dn, txn_rows=rows_, payload=200)
            if r and d:
                q = (r["cpu_s"] / r["events"]) / (d["cpu_drain_s"] / d["events"])
                rows.append((f"catch-up ({name}): CPU/event ≤ 1/5 of {dn} (outbox-relay from its start, "
                             f"Debezium drain window only)", f"{q:.3f}", q <= 0.2))
                q = r["peak_rss_kb"] / d["peak_rss_kb"]
                rows.append((f"catch-up ({name}): peak RSS ≤ 1/20 of {dn}", f"{q:.3f}", q <= 0.05))
    r = g(st, system="outbox-relay", rate=10000.0, payload=200)
    if r:
        v = r["latency_payload"]["p99_ms"]
        rows.append(("p99 at 10,000 ev/s ≤ 25 ms", f"{v:.1f} ms", v <= 25))
        d = g(st, system="debezium-default", rate=10000.0, payload=200)
        if d:
            q = v / d["latency_payload"]["p99_ms"]
            rows.append(("p99 at 10,000 ev/s ≤ 1/10 of Debezium default", f"{q:.3f}", q <= 0.1))
        for dn in ["debezium-default", "debezium-tuned"]:
            d = g(st, system=dn, rate=10000.0, payload=200)
            if d:
                q = r["cpu_s_per_million"] / d["cpu_s_per_million"]
                rows.append((f"CPU/event ≤ 1/5 of {dn} (10,000 ev/s)", f"{q:.3f}", q <= 0.2))
                q = r["peak_rss_kb"] / d["peak_rss_kb"]
                rows.append((f"peak RSS ≤ 1/20 of {dn} (10,000 ev/s)", f"{q:.3f}", q <= 0.05))
    if not rows:
        return
    out.append(title + "\n")
    out.append("| target | measured | met |")
    out.append("|---|---:|:---:|")
    for t, m, ok in rows:
        out.append(f"| {t} | {m} | {'yes' if ok else '**no**'} |")
    out.append("")


def md_targets_fast(results, out):
    """The targets of issues #11 (exactly-once p99 ≤ 2× at-least-once) and #15 (latency within
    a few ms of Kafka's floor, below every peer at every rate; catch-up CPU per event ≤ 0.5× the
    walsender's), from this run."""
    st = results["steady"]
    rows = []
    for k in sorted({steady_key(c) for c in st}):
        runs = {c["system"]: c for c in st if steady_key(c) == k}
        r = runs.get("outbox-relay")
        if not r:
            continue
        p99 = r["latency_payload"]["p99_ms"]
        name = steady_name(k)
        floors = [runs[f]["latency_payload"]["p99_ms"] for f in FLOORS if f in runs]
        if floors and r["rate"] in (1000, 10000):
            t = 5 if r["rate"] == 1000 else 10
            over = p99 - min(floors)
            rows.append((f"#15: p99 ≤ floor p99 + {t} ms at {name}",
                         f"{p99:.1f} vs {min(floors):.1f} ({over:+.1f} ms)", over <= t))
        for peer in ["debezium-default", "debezium-tuned", "polling"]:
            if peer in runs:
                q = runs[peer]["latency_payload"]["p99_ms"]
                rows.append((f"#15: p99 below {peer} at {name}", f"{p99:.1f} vs {q:.1f} ms", p99 < q))
        e = runs.get("outbox-relay-eos")
        if e:
            v = e["latency_payload"]["p99_ms"] / p99
            rows.append((f"#11: exactly-once p99 ≤ 2× at-least-once at {name}",
                         f"{e['latency_payload']['p99_ms']:.1f} / {p99:.1f} = {v:.2f}×", v <= 2))
    reps = catchup_reps(results)
    for c in reps:
        recv = next((r for r in reps if r["system"] == "pg_recvlogical" and shape_key(r) == shape_key(c)), None)
        if c["system"] == "outbox-relay" and recv:
            v = c["rate_from_start"] / recv["rate_from_start"]
            rows.append((f"#30: catch-up {shape_name(c)}: drain ≥ pg_recvlogical's (median drains, events/s from start)",
                         f"{c['rate_from_start']:,.0f} / {recv['rate_from_start']:,.0f} = {v:.2f}×", v >= 1.0))
        if c["system"] == "outbox-relay" and c.get("walsender_cpu_s"):
            v = c["cpu_s"] / c["walsender_cpu_s"]
            rows.append((f"#15: catch-up {shape_name(c)}: relay CPU per event ≤ 0.5× the walsender's",
                         f"{v:.2f}×", v <= 0.5))
            if c.get("busiest_thread_cpu_s") is not None:
                t = c["busiest_thread_cpu_s"] / c["walsender_cpu_s"]
                rows.append((f"#30: catch-up {shape_name(c)}: relay's busiest thread ({c['busiest_thread']}) "
                             f"≤ 0.5× the walsender's CPU", f"{t:.2f}×", t <= 0.5))
                rows.append((f"#30: catch-up {shape_name(c)}: whole relay process ≤ 1.0× the walsender's CPU",
                             f"{v:.2f}×", v <= 1.0))
    if not rows:
        return
    out.append("## Targets of issues 11, 15 and 30 (this run)\n")
    out.append("| target | measured | met |")
    out.append("|---|---:|:---:|")
    for t, m, ok in rows:
        out.append(f"| {t} | {m} | {'yes' if ok else '**no**'} |")
    out.append("")


def md_compare(results, other, label, out):
    """HEAD (this run) against a run of the patched relay (same harness, same machine, minutes apart)."""
    out.append(f"## Proposed changes, measured: {label}\n")
    out.append(
        f"A second run of the same harness right after the main one, with outbox-relay built from "
        f"`{other.get('meta', {}).get('relay_source', '?')}` (patches in `bench/proposals/`), pg_recvlogical "
        "alongside as the yardstick. Each backlog is drained as often as in the main run; the median drain is "
        "shown, and its ratio to pg_recvlogical in the same run.\n")
    out.append("| workload | figure | outbox-relay as built | with the proposed patches |")
    out.append("|---|---|---:|---:|")
    a_cu, b_cu = catchup_reps(results), catchup_reps(other)
    for rows_, payload, name in [(1000, 200, "catch-up, 1,000-row txns"), (1, 200, "catch-up, single-row txns"),
                                 (1000, 4096, "catch-up, 1,000-row txns, ~4 KB")]:
        ra, rb = find(a_cu, system="outbox-relay", txn_rows=rows_, payload=payload), \
            find(b_cu, system="outbox-relay", txn_rows=rows_, payload=payload)
        pa, pb = find(a_cu, system="pg_recvlogical", txn_rows=rows_, payload=payload), \
            find(b_cu, system="pg_recvlogical", txn_rows=rows_, payload=payload)
        if not (ra and rb):
            continue
        ka = f" ({ra['rate_from_start'] / pa['rate_from_start'] * 100:.0f}% of pg_recvlogical)" if pa else ""
        kb = f" ({rb['rate_from_start'] / pb['rate_from_start'] * 100:.0f}% of pg_recvlogical)" if pb else ""
        out.append(f"| {name} | events/s from start | {ra['rate_from_start']:,.0f}{ka} | {rb['rate_from_start']:,.0f}{kb} |")
        out.append(f"| {name} | CPU µs/event | {ra['cpu_s'] / ra['events'] * 1e6:.1f} | {rb['cpu_s'] / rb['events'] * 1e6:.1f} |")
        out.append(f"| {name} | peak RSS MiB | {ra['peak_rss_kb'] / 1024:.0f} | {rb['peak_rss_kb'] / 1024:.0f} |")
    for rate in [10000.0]:
        sa = find(results["steady"], system="outbox-relay", rate=rate, payload=200)
        sb = find(other["steady"], system="outbox-relay", rate=rate, payload=200)
        if sa and sb:
            for k, lab in [("p50_ms", "p50 ms"), ("p99_ms", "p99 ms"), ("p999_ms", "p99.9 ms")]:
                out.append(f"| steady {rate:,.0f} ev/s | {lab} | {sa['latency_payload'][k]:.1f} | "
                           f"{sb['latency_payload'][k]:.1f} |")
            out.append(f"| steady {rate:,.0f} ev/s | CPU s per M events | {sa['cpu_s_per_million']:.1f} | "
                       f"{sb['cpu_s_per_million']:.1f} |")
            out.append(f"| steady {rate:,.0f} ev/s | Kafka broker CPU (cores) | {sa['kafka_cpu_s'] / sa['seconds']:.2f} | "
                       f"{sb['kafka_cpu_s'] / sb['seconds']:.2f} |")
    za = find(results.get("saturation", []), system="outbox-relay")
    zb = find(other.get("saturation", []), system="outbox-relay")
    if za and zb:
        for x, y in zip(za["steps"], zb["steps"]):
            out.append(f"| saturation, offered {x['target_rate']:,.0f} ev/s | written → in Kafka (ev/s) | "
                       f"{x['load']['achieved_rate']:,.0f} → {x['relayed_rate']:,.0f} | "
                       f"{y['load']['achieved_rate']:,.0f} → {y['relayed_rate']:,.0f} |")
    out.append("")
    if any(c["system"].startswith("debezium") for c in other.get("catchup", []) + other.get("steady", [])):
        md_targets(other, out, "### Targets of issue 5 with the proposed patches (that run)")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("results")
    ap.add_argument("--md", required=True)
    ap.add_argument("--img", required=True)
    ap.add_argument("--notes")
    ap.add_argument("--compare", help="results.json of a run with the proposed patches")
    ap.add_argument("--compare-label", default="bench/proposals/*.diff")
    a = ap.parse_args()
    results = json.load(open(a.results))
    os.makedirs(a.img, exist_ok=True)
    images = plot_catchup(results, a.img) + plot_steady(results, a.img) + plot_cost(results, a.img)
    meta = results.get("meta", {})
    plan = results.get("plan") or {}
    rel = os.path.relpath(a.img, os.path.dirname(os.path.abspath(a.md)))
    out = []
    out.append("# Benchmarks: outbox-relay vs Debezium, native peers (outboxx, go-pq-cdc-kafka), a polling relay and pg_recvlogical\n")
    out.append("<!-- generated by scripts/bench.sh (bench/report.py) from results.json; edit bench/notes.md for "
               "the prose at the end -->\n")
    kind = "quick variant" if meta.get("quick") else "full run"
    out.append(f"Run: {meta.get('date_utc', '?')} ({kind}, {fmt(meta.get('suite_seconds', 0))} s). "
               f"Reproduce with `scripts/bench.sh` (full, ~40 min with every peer named) or `scripts/bench.sh --quick` (a couple of "
               f"minutes). Raw figures: `results.json` next to the report in `target/bench-results/`.\n")
    out.append("## Machine and versions\n")
    out.append("| | |\n|---|---|")
    for k, label in [("cpu_model", "CPU"), ("cpus", "cores"), ("mem_total", "memory"), ("virtualization", "virtualization"),
                     ("os", "OS"), ("kernel", "kernel"), ("postgres", "PostgreSQL"), ("kafka", "Kafka (broker, Connect, clients)"),
                     ("debezium", "Debezium PostgreSQL connector"), ("java", "Java"), ("rustc", "rustc"),
                     ("librdkafka", "librdkafka (outbox-relay, polling relay, consumer)"), ("relay_source", "outbox-relay built from"),
                     ("load_before", "load average at start")]:
        out.append(f"| {label} | {meta.get(k, '?')} |")
    if meta.get("relay_extra_toml"):
        out.append(f"| outbox-relay config overrides | `{meta['relay_extra_toml'].strip()}` |")
    out.append("")
    out.append(SETTINGS)
    md_targets_fast(results, out)
    md_targets(results, out)
    md_catchup(results, out)
    md_steady(results, out)
    md_saturation(results, out)
    md_burst(results, out)
    md_crash(results, out)
    md_exactly_once(results, out)
    md_messages(results, out)
    md_floor(results, out)
    md_stages(results, out)
    if a.compare and os.path.exists(a.compare):
        md_compare(results, json.load(open(a.compare)), a.compare_label, out)
    if results.get("failures"):
        out.append("## Failures in this run\n")
        for f in results["failures"]:
            out.append(f"- {f}")
        out.append("")
    if images:
        out.append("## Plots\n")
        for f in images:
            out.append(f"![{f}]({rel}/{f})\n")
    if a.notes and os.path.exists(a.notes):
        out.append(open(a.notes).read())
    with open(a.md, "w") as fh:
        fh.write("\n".join(out) + "\n")
    print(f"wrote {a.md} and {len(images)} plot(s) in {a.img}", file=sys.stderr)


SETTINGS = """## Systems and settings

Every system runs one at a time against the same PostgreSQL and the same Kafka broker, each with its own
replication slot and publication (`FOR TABLE public.outbox`), producing to its own fresh topics
(`<run>.order`, 3 partitions, RF 1). Routing is the Outbox Event Router's everywhere: topic
`<prefix>.<aggregatetype>`, key `aggregateid`, value the payload JSON text, headers `id` and
`eventType`.

| system | what runs | settings |
|---|---|---|
| pg_recvlogical | PostgreSQL 15's `pg_recvlogical --start -o proto_version=1 -o publication_names=… -f /dev/null` (`--endpos` = the backlog's end LSN) | the upper bound: the walsender decoding the same publication (`publish = 'insert'`) with pgoutput, nothing produced; in steady runs `-f - -F 0` into a pipe the harness reads, the database's floor of the latency |
| outbox-relay | `outbox-relay run` (release build), config generated by the harness | defaults: current-thread tokio runtime, idempotent producer (acks=all, one request in flight per connection and a partition's first record alone: issue 40), `linger_ms = 20`, `compression = "lz4"`, `max_in_flight_records = 10000`, `read_coalesce_us = 1000`, `buffer_events = 1024`, relay headers on, heartbeat on; metrics listener moved to an ephemeral port |
| outbox-relay-eos | the same binary with `kafka.transactional_id` and `relay.delivery = "exactly-once"` | as outbox-relay, plus two transactional producers, `kafka.commit_min_interval_ms = 10`, a checkpoint topic of its own per run; the latency consumer reads with `isolation.level=read_committed` for it |
| kafka-floor-linger0, kafka-floor-linger5 | Kafka's floor: a bare producer in the harness (`bench/src/floor.rs`), no PostgreSQL | writes the same records (payload as jsonb text, key, headers `id` and `eventType`) at the same open-loop rate to the same topic layout and latency consumer; acks=all, idempotent, lz4; linger 0 and linger 5 |
| kafka-floor-txn | exactly-once's floor: the same bare producer, transactional | linger 0, one producer committing back to back (librdkafka's own flush before each commit), read by the same read-committed consumer |
| debezium-default | Kafka Connect 4.3.1 standalone (`infra/kafka/lib`) + Debezium 3.6.1.Final PostgreSQL connector + Outbox Event Router, `infra/debezium/connector-default.properties` | only what the outbox needs (`plugin.name=pgoutput`, `snapshot.mode=no_data`, `publication.autocreate.mode=filtered`, the router); `poll.interval.ms=500`, `max.batch.size=2048`, `max.queue.size=8192`; Connect's producer: acks=all, 1 request in flight, no idempotence, `linger.ms=5`, `batch.size=16384`, no compression; `offset.flush.interval.ms=60000`; heap as `connect-standalone.sh`: `-Xms256M -Xmx2G` |
| debezium-tuned | same, `infra/debezium/connector-tuned.properties` | `poll.interval.ms=10`, `max.batch.size=8192`, `max.queue.size=32768`; producer overrides: lz4, `linger.ms=5`, `batch.size=262144`, idempotence on with 5 requests in flight |
| outboxx | lukashes/outboxx 0.3.0 (Zig, Debian's librdkafka 2.0.2), built from source by `bench/peers/build.sh`; only when named in `--systems` | a slot and INSERT-only publication the harness creates; one `[[streams]]` per outbox table, `format = "json"`, key `aggregateid`, to `<run>.order`; its producer is fixed in its code: acks=all, idempotent, 5 in flight, `linger.ms=50`, `batch.size=262144`, no compression; it confirms the LSN every 10 s; its record is an envelope (`op`, `data` with every column and the payload as an escaped string, `meta`), no headers ([notebook](../bench/notebook.md#issue-46-item-1-native-peers-side-by-side-in-a-catch-up-outboxx-and-go-pq-cdc-kafka-2026-12-06-1549-1556-utc)) |
| go-pq-cdc-kafka | Trendyol/go-pq-cdc-kafka v1.3.1 (Go, segmentio/kafka-go) with the smallest main its README shows (`bench/peers/go-pq-cdc-kafka/`); only when named | a slot and publication the harness creates; `requiredAcks: -1`, no idempotence (kafka-go has none), `producerBatchSize: 10000`, `producerBatchTickerDuration: 100ms`, Hash balancer; key `aggregateid`, headers `id` and `eventType`, the payload re-marshalled by Go |
| polling | `bench poll-relay` (Rust, in the harness), one worker | per poll: `BEGIN; SELECT … WHERE published_at IS NULL ORDER BY created_at, id LIMIT 100 FOR UPDATE SKIP LOCKED`; produce all (rdkafka, acks=all, idempotent, `linger.ms=5`, no compression) and wait for every ack; `UPDATE … SET published_at = now() WHERE id = ANY(…)`; `COMMIT`; sleep 50 ms after an empty poll. Partial index `(created_at, id) WHERE published_at IS NULL` |

PostgreSQL 15 (`infra/pg/start.sh`): `wal_level=logical`, `fsync=off` (as the test stack),
`shared_buffers=256MB`, `max_wal_size=4GB`. Kafka 4.3.1 single KRaft node (`infra/kafka/start.sh`),
heap 1 GiB. The outbox table is `migrations/0001_outbox.sql` plus `published_at` (used only by the
polling relay). Payloads: order-like JSON documents of ~200 B or ~4 KB (the 4 KB ones compress to
~1.4 KB in TOAST), with `ts`. The polling relay always runs last in a workload: its UPDATEs would
otherwise be WAL that the log-based systems must decode and skip.

Measurements: CPU = utime + stime from `/proc/<pid>/stat` (all threads), peak RSS = `VmHWM` from
`/proc/<pid>/status`, sampled every 100 ms and read once more at the end of the window; the JVM's
pid for Connect. Catch-up completion = the sum of the topic's high watermarks (polled every 50 ms)
reaching the backlog size.
"""

if __name__ == "__main__":
    main()
