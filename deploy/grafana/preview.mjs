#!/usr/bin/env node
// Renders triad-dashboard.json as a static HTML page from a real Prometheus: every panel's own
// queries are evaluated by Prometheus's HTTP API (query_range) over a time window and drawn as
// Grafana draws those panel kinds (time series, stat, bar gauge, rows) in its dark theme. It is a
// preview, not Grafana (which is not in Debian 12): deploy/screenshot.sh uses it for the README's
// picture of a real run. Node 20, no packages.
//
//   node preview.mjs --dashboard triad-dashboard.json --prometheus http://127.0.0.1:9090 \
//     --from UNIX --to UNIX [--step 2] [--rate-interval 15s] --out preview.html
import { readFileSync, writeFileSync } from 'node:fs';

function parseArgs(argv) {
  const args = { step: 2, 'rate-interval': '15s' };
  for (let i = 2; i < argv.length; i += 2) {
    if (!argv[i].startsWith('--') || i + 1 >= argv.length)
      throw new Error(`preview: expected --name value pairs, got "${argv[i]}"`);
    args[argv[i].slice(2)] = argv[i + 1];
  }
  for (const need of ['dashboard', 'prometheus', 'from', 'to', 'out'])
    if (args[need] === undefined) throw new Error(`preview: --${need} is required`);
  return args;
}

const palette = ['#73bf69', '#f2cc0c', '#8ab8ff', '#ff780a', '#f2495c', '#5794f2', '#b877d9',
                 '#705da0', '#37872d', '#fade2a', '#ff9830', '#96d98d', '#ca95e5', '#ffb357'];

// A value in the panel's unit, short, as Grafana writes it.
function formatValue(v, unit) {
  if (v === null || v === undefined || Number.isNaN(v)) return 'No data';
  const fixed = (x, d = 2) => {
    const a = Math.abs(x);
    return (a >= 100 ? x.toFixed(0) : a >= 10 ? x.toFixed(1) : x.toFixed(d)).replace(/\.0+$/, '');
  };
  const scaled = (x, base, names) => {
    let i = 0;
    while (Math.abs(x) >= base && i < names.length - 1) { x /= base; ++i; }
    return `${fixed(x)} ${names[i]}`;
  };
  switch (unit) {
    case 'percentunit': return `${fixed(v * 100, 1)}%`;
    case 's':
      if (v === 0) return '0 s';
      if (Math.abs(v) < 1e-3) return `${fixed(v * 1e6)} µs`;
      if (Math.abs(v) < 1) return `${fixed(v * 1e3)} ms`;
      return `${fixed(v)} s`;
    case 'bytes': return scaled(v, 1024, ['B', 'KiB', 'MiB', 'GiB', 'TiB']);
    case 'Bps': return scaled(v, 1000, ['B/s', 'kB/s', 'MB/s', 'GB/s']);
    case 'reqps': return `${fixed(v)} req/s`;
    case 'ops': return `${fixed(v)} ops/s`;
    default: return scaled(v, 1000, ['', 'K', 'M', 'G']).trim();
  }
}

function legend(format, metric) {
  if (!format) return JSON.stringify(metric);
  return format.replace(/\{\{\s*(\w+)\s*\}\}/g, (_, k) => metric[k] ?? '');
}

// A target's series over the window; an instant target (Grafana's "instant": true) is
// evaluated once, at the window's end, as Grafana does.
async function query(prom, target, args) {
  const q = target.expr.replaceAll('$__rate_interval', args['rate-interval']).replaceAll('$instance', '.*');
  const url = target.instant
    ? `${prom}/api/v1/query?` + new URLSearchParams({ query: q, time: args.to })
    : `${prom}/api/v1/query_range?` + new URLSearchParams(
        { query: q, start: args.from, end: args.to, step: String(args.step) });
  const res = await fetch(url);
  const body = await res.json();
  if (body.status !== 'success')
    throw new Error(`preview: Prometheus refused "${q}": ${body.error ?? res.status}`);
  return body.data.result.map((r) => (target.instant ? { metric: r.metric, values: [r.value] } : r));
}

const esc = (s) => String(s).replace(/[&<>"]/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;' })[c]);

function unitOf(panel, name) {
  for (const o of panel.fieldConfig?.overrides ?? [])
    if (o.matcher?.id === 'byName' && o.matcher.options === name)
      for (const p of o.properties) if (p.id === 'unit') return p.value;
  return panel.fieldConfig?.defaults?.unit;
}
function onRight(panel, name) {
  for (const o of panel.fieldConfig?.overrides ?? [])
    if (o.matcher?.id === 'byName' && o.matcher.options === name)
      for (const p of o.properties) if (p.id === 'custom.axisPlacement') return p.value === 'right';
  return false;
}

// One time-series panel as SVG: lines (stacked when the panel says so), a left axis in the
// panel's unit and a right one for series moved there, and the legend under it.
function timeseries(panel, series, w, h, args) {
  const from = Number(args.from), to = Number(args.to);
  const padL = 62, padR = series.some((s) => s.right) ? 62 : 12, padT = 8, legendH = 22 * Math.ceil(series.length / 3);
  const ph = h - padT - 24 - legendH, pw = w - padL - padR;
  const stacked = panel.fieldConfig?.defaults?.custom?.stacking?.mode === 'normal';
  const sides = { left: series.filter((s) => !s.right), right: series.filter((s) => s.right) };
  let out = `<svg width="${w}" height="${h}">`;
  const x = (t) => padL + ((t - from) / (to - from)) * pw;
  for (const [side, group] of Object.entries(sides)) {
    if (group.length === 0) continue;
    let base = new Map();
    const drawn = group.map((s) => {
      const pts = s.values.map(([t, v]) => {
        let y = Number(v);
        if (!Number.isFinite(y)) return null;
        if (stacked) { y += base.get(t) ?? 0; base.set(t, y); }
        return [t, y];
      }).filter(Boolean);
      return { ...s, pts };
    });
    let max = Math.max(0, ...drawn.flatMap((s) => s.pts.map((p) => p[1])));
    const min = Math.min(0, ...drawn.flatMap((s) => s.pts.map((p) => p[1])));
    if (max <= min) max = min + 1;
    max *= 1.08;
    const y = (v) => padT + ph - ((v - min) / (max - min)) * ph;
    const unit = side === 'left' ? panel.fieldConfig?.defaults?.unit : group[0].unit;
    for (let i = 0; i <= 4; ++i) {
      const v = min + ((max - min) * i) / 4, yy = y(v);
      if (side === 'left')
        out += `<line x1="${padL}" x2="${padL + pw}" y1="${yy}" y2="${yy}" stroke="#2a2d33"/>`;
      const tx = side === 'left' ? padL - 6 : padL + pw + 6;
      out += `<text x="${tx}" y="${yy + 4}" fill="#9fa3ab" font-size="11" text-anchor="${side === 'left' ? 'end' : 'start'}">${esc(formatValue(v, unit))}</text>`;
    }
    let prev = null;
    for (const s of drawn) {
      if (s.pts.length === 0) continue;
      const line = s.pts.map(([t, v]) => `${x(t).toFixed(1)},${y(v).toFixed(1)}`).join(' ');
      if (stacked) {
        const lower = prev ? [...prev].reverse().map(([t, v]) => `${x(t).toFixed(1)},${y(v).toFixed(1)}`).join(' ')
                           : `${x(s.pts.at(-1)[0]).toFixed(1)},${y(0).toFixed(1)} ${x(s.pts[0][0]).toFixed(1)},${y(0).toFixed(1)}`;
        out += `<polygon points="${line} ${lower}" fill="${s.color}" fill-opacity="0.55"/>`;
        prev = s.pts;
      }
      out += `<polyline points="${line}" fill="none" stroke="${s.color}" stroke-width="1.5" ${s.right ? 'stroke-dasharray="4 2"' : ''}/>`;
    }
  }
  for (let i = 0; i <= 4; ++i) {
    const t = from + ((to - from) * i) / 4;
    const d = new Date(t * 1000);
    const label = `${String(d.getUTCHours()).padStart(2, '0')}:${String(d.getUTCMinutes()).padStart(2, '0')}:${String(d.getUTCSeconds()).padStart(2, '0')}`;
    const anchor = i === 0 ? 'start' : i === 4 ? 'end' : 'middle';
    out += `<text x="${x(t)}" y="${padT + ph + 16}" fill="#9fa3ab" font-size="11" text-anchor="${anchor}">${label}</text>`;
  }
  series.forEach((s, i) => {
    const lx = 12 + (i % 3) * ((w - 12) / 3), ly = padT + ph + 36 + Math.floor(i / 3) * 22;
    out += `<rect x="${lx}" y="${ly - 9}" width="14" height="4" fill="${s.color}"/>` +
           `<text x="${lx + 20}" y="${ly - 3}" fill="#ccccdc" font-size="12">${esc(s.name)}</text>`;
  });
  return out + '</svg>';
}

function lastValue(s) {
  for (let i = s.values.length - 1; i >= 0; --i) {
    const v = Number(s.values[i][1]);
    if (Number.isFinite(v)) return v;
  }
  return null;
}

function stat(panel, series) {
  const unit = panel.fieldConfig?.defaults?.unit;
  const mode = panel.options?.textMode ?? 'auto';
  if (series.length === 0) return `<div class="stat"><div class="big muted">No data</div></div>`;
  return '<div class="stat">' + series.slice(0, 2).map((s) => {
    const v = lastValue(s);
    if (mode === 'name') return `<div class="big name">${esc(s.name)}</div>`;
    const name = mode === 'value_and_name' ? `<div class="statname">${esc(s.name)}</div>` : '';
    return `${name}<div class="big" style="color:${s.color}">${esc(formatValue(v, unit))}</div>`;
  }).join('') + '</div>';
}

function bargauge(panel, series) {
  const unit = panel.fieldConfig?.defaults?.unit;
  return '<div class="bars">' + series.map((s) => {
    const v = lastValue(s) ?? 0;
    const color = v >= 0.9 ? '#f2495c' : v >= 0.75 ? '#ff9830' : '#73bf69';
    return `<div class="bar"><span class="barname">${esc(s.name)}</span><span class="track"><span class="fill" style="width:${Math.min(100, v * 100)}%;background:${color}"></span></span><span class="barval" style="color:${color}">${esc(formatValue(v, unit))}</span></div>`;
  }).join('') + '</div>';
}

async function main() {
  const args = parseArgs(process.argv);
  const dash = JSON.parse(readFileSync(args.dashboard, 'utf8'));
  const width = 1600, colW = width / 24, rowH = 30;
  let html = '';
  let bottom = 0;
  for (const panel of dash.panels) {
    const g = panel.gridPos;
    const left = g.x * colW, top = g.y * rowH, w = g.w * colW - 8, h = g.h * rowH - 8;
    bottom = Math.max(bottom, top + h + 8);
    if (panel.type === 'row') {
      html += `<div class="row" style="left:${left}px;top:${top}px;width:${w}px">${esc(panel.title)}</div>`;
      continue;
    }
    const series = [];
    for (const t of panel.targets ?? []) {
      for (const r of await query(args.prometheus, t, args)) {
        const name = legend(t.legendFormat, r.metric);
        series.push({ name, values: r.values, unit: unitOf(panel, name), right: onRight(panel, name),
                      color: palette[series.length % palette.length] });
      }
    }
    const innerH = h - 32;
    let body;
    if (panel.type === 'timeseries') body = timeseries(panel, series, w - 4, innerH, args);
    else if (panel.type === 'stat') body = stat(panel, series);
    else if (panel.type === 'bargauge') body = bargauge(panel, series);
    else body = `<div class="muted">panel type ${esc(panel.type)} not previewed</div>`;
    html += `<div class="panel" style="left:${left}px;top:${top}px;width:${w}px;height:${h}px">` +
            `<div class="title">${esc(panel.title)}</div>${body}</div>`;
  }
  const window = `${new Date(Number(args.from) * 1000).toISOString()} to ${new Date(Number(args.to) * 1000).toISOString()}`;
  const page = `<!doctype html><html><head><meta charset="utf-8"><title>${esc(dash.title)}</title><style>
body{margin:0;background:#111217;color:#ccccdc;font-family:"DejaVu Sans",sans-serif}
header{padding:10px 16px;font-size:18px;border-bottom:1px solid #24262c}
header small{color:#8e8e9a;font-size:12px;margin-left:12px}
.canvas{position:relative;margin:8px;width:${width}px;height:${bottom}px}
.panel{position:absolute;background:#181b1f;border:1px solid #24262c;border-radius:2px;overflow:hidden}
.title{font-size:13px;font-weight:bold;padding:6px 8px;height:18px;color:#ccccdc}
.row{position:absolute;font-size:15px;font-weight:bold;padding-top:6px}
.stat{display:flex;flex-direction:column;justify-content:center;align-items:center;height:70%}
.big{font-size:30px;font-weight:bold}.big.name{font-size:20px;color:#ccccdc}.statname{font-size:13px;color:#9fa3ab}
.muted{color:#8e8e9a}
.bars{padding:6px 12px}.bar{display:flex;align-items:center;margin:10px 0}
.barname{width:60px}.track{flex:1;height:22px;background:#22252b;margin:0 10px;position:relative}
.fill{position:absolute;left:0;top:0;bottom:0}.barval{width:60px;text-align:right;font-weight:bold}
footer{padding:6px 16px 12px;color:#8e8e9a;font-size:12px}
</style></head><body><header>${esc(dash.title)}<small>${esc(window)} · step ${esc(args.step)} s · rate interval ${esc(args['rate-interval'])}</small></header>
<div class="canvas">${html}</div>
<footer>Preview of deploy/grafana/triad-dashboard.json drawn by deploy/grafana/preview.mjs: each panel's queries evaluated by Prometheus (${esc(args.prometheus)}) over the window above; not Grafana.</footer>
</body></html>`;
  writeFileSync(args.out, page);
  console.log(`preview: ${dash.panels.length} panels to ${args.out} (${width + 16}x${bottom + 90} px)`);
}

main().catch((e) => { console.error(e.message); process.exit(1); });
