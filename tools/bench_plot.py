#!/usr/bin/python3
"""Render kvfs-bench JSON results as PNG plots and a markdown table (docs/benchmarks.md).

Usage: bench_plot.py RESULT.json... [--out DIR]

Needs python3-matplotlib (Debian package). Writes, into DIR (default: the first file's directory):
  throughput.png   chunks/s per phase, direct vs kvfs, one panel per run (log scale)
  backing_ops.png  backing metadata operations per chunk (store/load) and per probe (lookup)
  tables.md        one markdown table per run (what docs/benchmarks.md embeds)
"""
import argparse
import json
import os

PHASES = ["store", "lookup", "load", "warm_load"]


def runs(paths):
    for p in paths:
        with open(p) as f:
            j = json.load(f)
        name = os.path.splitext(os.path.basename(p))[0]
        for prof in j["profiles"]:
            yield name, j, prof


def ok(prof, mode):
    m = prof["modes"].get(mode)
    return m is not None and m.get("ok")


def fmt(v):
    if v >= 100:
        return f"{v:,.0f}"
    if v >= 10:
        return f"{v:.1f}"
    return f"{v:.2f}"


def ops_str(ph):
    per = ph["backing"]["ops_per_unit"]
    skip = {"read", "write", "forget", "release", "releasedir", "security_xattr_probe", "access_f_ok"}
    parts = [f"{k} {v:.2g}" for k, v in sorted(per.items(), key=lambda kv: -kv[1]) if k not in skip]
    return ", ".join(parts) or "0"


def table(name, j, prof):
    lines = []
    cfg = j["config"]
    lines.append(f"#### {name}: `{prof['profile']}`, {prof['chunks']} chunks x {prof['chunk_bytes']:,} B, "
                 f"{prof['threads']} threads, {prof['latency_us']} us per backing metadata op, "
                 f"hit ratio {prof['hit_ratio']}")
    lines.append("")
    if not (ok(prof, "direct") and ok(prof, "kvfs")):
        for m, r in prof["modes"].items():
            if not r.get("ok"):
                lines.append(f"**{m} failed:** `{r.get('error')}`")
        lines.append("")
        return "\n".join(lines)
    d, k = prof["modes"]["direct"]["phases"], prof["modes"]["kvfs"]["phases"]
    lines.append("| phase | metric | direct | kvfs | kvfs/direct |")
    lines.append("|---|---|---:|---:|---:|")
    for ph in PHASES:
        a, b = d[ph], k[ph]
        unit = "probes/s" if ph == "lookup" else "chunks/s"
        r = b["units_per_s"] / a["units_per_s"] if a["units_per_s"] else 0
        lines.append(f"| {ph} | {unit} | {fmt(a['units_per_s'])} | {fmt(b['units_per_s'])} | **{r:.2f}x** |")
        if ph != "lookup":
            r = b["mb_per_s"] / a["mb_per_s"] if a["mb_per_s"] else 0
            lines.append(f"| | MB/s | {fmt(a['mb_per_s'])} | {fmt(b['mb_per_s'])} | {r:.2f}x |")
        lines.append(f"| | p50 / p99 ms | {a['p50_us']/1e3:.2f} / {a['p99_us']/1e3:.2f} | "
                     f"{b['p50_us']/1e3:.2f} / {b['p99_us']/1e3:.2f} | |")
        lines.append(f"| | backing metadata ops / {'probe' if ph == 'lookup' else 'chunk'} | "
                     f"{a['backing']['metadata_ops_per_unit']:.3f} | {b['backing']['metadata_ops_per_unit']:.3f} | |")
        lines.append(f"| | backing syncs / unit | {a['backing']['syncs_per_unit']:.3f} | "
                     f"{b['backing']['syncs_per_unit']:.3f} | |")
        lines.append(f"| | backing MB written / read | {a['backing']['bytes_written']/1e6:,.0f} / "
                     f"{a['backing']['bytes_read']/1e6:,.0f} | {b['backing']['bytes_written']/1e6:,.0f} / "
                     f"{b['backing']['bytes_read']/1e6:,.0f} | |")
        lines.append(f"| | backing ops by type | {ops_str(a)} | {ops_str(b)} | |")
        lines.append(f"| | NFS RPCs / unit (test bed) | _tbd_ | _tbd_ | |")
    hwm = prof["modes"]["kvfs"].get("daemon_vmhwm_kb", 0) / 1024
    lines.append(f"| all | kvfs daemon peak RSS (VmHWM) | | {hwm:,.0f} MiB | |")
    vs = prof.get("warm_load_vs_tmpfs")
    if vs:
        lines.append(f"| warm_load | MB/s / tmpfs ({vs['tmpfs_mb_per_s']:,.0f} MB/s, same loads) | "
                     f"{vs.get('direct', 0):.2f}x | {vs.get('kvfs', 0):.2f}x | |")
    for ph in ("store", "load", "warm_load"):
        if "cpu_s_per_gb" in d[ph] and "cpu_s_per_gb" in k[ph]:
            a_, b_ = d[ph]["cpu_s_per_gb"], k[ph]["cpu_s_per_gb"]
            lines.append(f"| {ph} | CPU s per GB (client + kvfs + nfsim) | {a_:.2f} | {b_:.2f} | "
                         f"{(b_ / a_ if a_ else 0):.2f}x |")
        fr = k[ph].get("kvfs_fuse_requests_per_unit")
        if fr:
            txt = ", ".join(f"{t} {v:.2g}" for t, v in sorted(fr.items(), key=lambda kv: -kv[1]) if t != "getxattr")
            lines.append(f"| {ph} | kvfs FUSE requests / chunk | | {txt} | |")
    lines.append("")
    # per-syscall latencies of the store and load phases
    lines.append("<details><summary>per-syscall p50 / p99 (us)</summary>\n")
    lines.append("| phase | syscall | n | direct p50 / p99 | kvfs p50 / p99 |")
    lines.append("|---|---|---:|---:|---:|")
    for ph in PHASES:
        for sc, x in sorted(d[ph]["syscalls"].items()):
            y = k[ph]["syscalls"].get(sc, {"p50_us": 0, "p99_us": 0})
            lines.append(f"| {ph} | {sc} | {x['n']} | {x['p50_us']:.0f} / {x['p99_us']:.0f} | "
                         f"{y['p50_us']:.0f} / {y['p99_us']:.0f} |")
    lines.append("\n</details>\n")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("json", nargs="+")
    ap.add_argument("--out")
    a = ap.parse_args()
    out = a.out or os.path.dirname(os.path.abspath(a.json[0]))
    os.makedirs(out, exist_ok=True)
    rs = [r for r in runs(a.json)]
    with open(os.path.join(out, "tables.md"), "w") as f:
        for r in rs:
            f.write(table(*r) + "\n")
    good = [(n, j, p) for n, j, p in rs if ok(p, "direct") and ok(p, "kvfs")]
    if not good:
        return
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cols = 3
    rows = (len(good) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(5 * cols, 3.6 * rows), squeeze=False)
    for ax, (name, j, p) in zip(axes.flat, good):
        d, k = p["modes"]["direct"]["phases"], p["modes"]["kvfs"]["phases"]
        xs = range(len(PHASES))
        ax.bar([x - 0.2 for x in xs], [d[ph]["units_per_s"] for ph in PHASES], 0.4, label="direct (nfsim)")
        ax.bar([x + 0.2 for x in xs], [k[ph]["units_per_s"] for ph in PHASES], 0.4, label="kvfs over nfsim")
        ax.set_yscale("log")
        ax.set_xticks(list(xs))
        ax.set_xticklabels(["store", "lookup\n(probes/s)", "load", "warm load"])
        ax.set_title(f"{name}\n{p['chunk_bytes']:,} B, {p['latency_us']} us/op", fontsize=9)
        ax.set_ylabel("chunks/s")
        ax.grid(axis="y", alpha=0.3)
    for ax in list(axes.flat)[len(good):]:
        ax.axis("off")
    axes.flat[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(os.path.join(out, "throughput.png"), dpi=90)

    fig, ax = plt.subplots(figsize=(max(8, 1.3 * len(good)), 4))
    xs = range(len(good))
    w = 0.13
    for i, (mode, ph, hatch) in enumerate([("direct", "store", ""), ("kvfs", "store", ""),
                                           ("direct", "lookup", "//"), ("kvfs", "lookup", "//"),
                                           ("direct", "load", ".."), ("kvfs", "load", "..")]):
        vals = [p["modes"][mode]["phases"][ph]["backing"]["metadata_ops_per_unit"] for _, _, p in good]
        ax.bar([x + (i - 2.5) * w for x in xs], [max(v, 1e-3) for v in vals], w, hatch=hatch,
               color="C0" if mode == "direct" else "C1", edgecolor="k", linewidth=0.3, label=f"{mode} {ph}")
    ax.set_yscale("log")
    ax.set_xticks(list(xs))
    ax.set_xticklabels([n for n, _, _ in good], rotation=20, fontsize=8)
    ax.set_ylabel("backing metadata ops per chunk / probe")
    ax.axhline(0.01, color="k", linestyle=":", linewidth=0.8)
    ax.legend(fontsize=7, ncol=3)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(os.path.join(out, "backing_ops.png"), dpi=90)


if __name__ == "__main__":
    main()
