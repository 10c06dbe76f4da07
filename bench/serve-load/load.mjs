#!/usr/bin/env node
// serve-load: a load test of an OpenAI-compatible server (lilac serve) with
// the official `openai` npm client. For each concurrency level it runs N
// streamed chat requests with that many in flight, and reports requests/s,
// generated tokens/s, time to first token, the time between streamed chunks,
// rejections (429/503) and the server's resident memory (from /metrics).
// See README.md.
//
//   node load.mjs --url http://127.0.0.1:8080/v1 [--levels 1,2,4,8,16]
//       [--requests-per-level N] [--max-tokens 64] [--prompt-tokens 100]
//       [--out results.json] [--chart chart.svg]
import { writeFileSync } from 'node:fs';
import { performance } from 'node:perf_hooks';
import { parseArgs } from 'node:util';
import OpenAI from 'openai';
import { VERSION as CLIENT_VERSION } from 'openai/version';

const USAGE = `usage: node load.mjs --url URL [options]
  --url URL                  the API's base URL (http://127.0.0.1:8080/v1)
  --levels L                 concurrency levels, comma-separated (1,2,4,8,16)
  --requests-per-level N     streamed chat requests per level (32)
  --max-tokens N             max_tokens of each request (64)
  --prompt-tokens N          about this many prompt tokens per request (100)
  --model NAME               the model (the first one /v1/models lists)
  --api-key KEY              the API key ($OPENAI_API_KEY, else "x")
  --temperature T            sampling temperature (1)
  --no-ignore-eos            let requests stop at end-of-text (by default each
                             generates max_tokens: lilac's ignore_eos)
  --metrics-url URL          where to scrape lilac_resident_memory_bytes
                             (the --url's origin + /metrics)
  --timeout S                one request's time limit in seconds (600)
  --out FILE                 write the results as JSON
  --chart FILE               write an SVG chart (tokens/s and p95 TTFT
                             against concurrency)
  -h, --help                 this text`;

function fail(msg) {
    console.error(`serve-load: ${msg}`);
    process.exit(2);
}

let opts;
try {
    opts = parseArgs({
        options: {
            url: { type: 'string', default: 'http://127.0.0.1:8080/v1' },
            levels: { type: 'string', default: '1,2,4,8,16' },
            'requests-per-level': { type: 'string', default: '32' },
            'max-tokens': { type: 'string', default: '64' },
            'prompt-tokens': { type: 'string', default: '100' },
            model: { type: 'string' },
            'api-key': { type: 'string' },
            temperature: { type: 'string', default: '1' },
            'no-ignore-eos': { type: 'boolean', default: false },
            'metrics-url': { type: 'string' },
            timeout: { type: 'string', default: '600' },
            out: { type: 'string' },
            chart: { type: 'string' },
            help: { type: 'boolean', short: 'h', default: false },
        },
        strict: true,
        allowPositionals: false,
    }).values;
} catch (e) {
    fail(`${e.message}\n${USAGE}`);
}
if (opts.help) {
    console.log(USAGE);
    process.exit(0);
}

function posInt(name) {
    const v = Number(opts[name]);
    if (!Number.isInteger(v) || v < 1) fail(`--${name} must be a positive integer, not '${opts[name]}'`);
    return v;
}
const levels = opts.levels.split(',').map((s) => Number(s.trim()));
if (!levels.length || levels.some((v) => !Number.isInteger(v) || v < 1))
    fail(`--levels must be positive integers separated by commas, not '${opts.levels}'`);
const perLevel = posInt('requests-per-level');
const maxTokens = posInt('max-tokens');
const promptTokens = posInt('prompt-tokens');
const timeoutS = posInt('timeout');
const temperature = Number(opts.temperature);
if (!(temperature >= 0 && temperature <= 2)) fail('--temperature must be between 0 and 2');
const ignoreEos = !opts['no-ignore-eos'];
let baseURL;
try {
    baseURL = new URL(opts.url);
} catch {
    fail(`--url is not a URL: '${opts.url}'`);
}
const metricsURL = opts['metrics-url'] ?? `${baseURL.origin}/metrics`;

const client = new OpenAI({
    baseURL: baseURL.href.replace(/\/$/, ''),
    apiKey: opts['api-key'] ?? process.env.OPENAI_API_KEY ?? 'x',
    maxRetries: 0, // a rejection is counted, not retried
    timeout: timeoutS * 1000,
});

// ---- statistics ---------------------------------------------------------------------------------------

function percentile(xs, p) {
    if (!xs.length) return null;
    const s = Float64Array.from(xs).sort();
    return s[Math.min(s.length - 1, Math.max(0, Math.ceil((p / 100) * s.length) - 1))]; // nearest rank
}
const mean = (xs) => (xs.length ? xs.reduce((a, b) => a + b, 0) / xs.length : null);
const round = (x, d = 1) => (x === null || x === undefined ? null : Math.round(x * 10 ** d) / 10 ** d);

// ---- the prompt ---------------------------------------------------------------------------------------

const WORDS = ('the quick brown fox jumps over a lazy dog while seven small birds sing about rivers mountains ' +
    'and distant cities under a pale morning sky').split(' ');
function filler(nWords, seed) {
    const out = [];
    for (let i = 0; i < nWords; i++) out.push(WORDS[(i * 7 + seed) % WORDS.length]);
    return out.join(' ');
}
// Each request's prompt begins with its own tag, so no request reuses another's prompt from the
// server's prefix cache: every TTFT includes a whole prefill.
function messagesFor(tag, nWords) {
    return [{ role: 'user', content: `[${tag}] ${filler(nWords, tag.length)}. Write a story about it.` }];
}

// ---- one request --------------------------------------------------------------------------------------

function errorKind(e) {
    if (e instanceof OpenAI.APIError && e.status === 429) return 'rejected_429';
    if (e instanceof OpenAI.APIError && e.status === 503) return 'rejected_503';
    return 'errors';
}

async function oneRequest(model, messages) {
    const t0 = performance.now();
    const res = { ok: false, ttft: null, gaps: [], tokens: 0, promptTokens: null, chunks: 0 };
    try {
        const stream = await client.chat.completions.create({
            model, messages, max_tokens: maxTokens, temperature, stream: true,
            stream_options: { include_usage: true }, ...(ignoreEos ? { ignore_eos: true } : {}),
        });
        let last = null;
        for await (const ch of stream) {
            if (ch.usage) {
                res.tokens = ch.usage.completion_tokens;
                res.promptTokens = ch.usage.prompt_tokens;
            }
            const d = ch.choices?.[0]?.delta;
            const text = (d?.content ?? '') + (d?.reasoning_content ?? '');
            if (!text && !d?.tool_calls) continue;
            const t = performance.now();
            res.chunks++;
            if (last === null) res.ttft = t - t0;
            else res.gaps.push(t - last);
            last = t;
        }
        if (!res.tokens) res.tokens = res.chunks; // a server without usage: one token a chunk
        res.ok = true;
    } catch (e) {
        res.error = errorKind(e);
        res.message = e?.message ?? String(e);
    }
    res.ms = performance.now() - t0;
    return res;
}

async function residentBytes() {
    try {
        const r = await fetch(metricsURL);
        if (!r.ok) return null;
        const m = (await r.text()).match(/^lilac_resident_memory_bytes(?:\{[^}]*\})? ([0-9.eE+]+)$/m);
        return m ? Number(m[1]) : null;
    } catch {
        return null;
    }
}

// ---- a level ------------------------------------------------------------------------------------------

async function runLevel(model, c, nWords, levelIndex) {
    let next = 0;
    const results = [];
    const t0 = performance.now();
    async function worker() {
        while (next < perLevel) {
            const i = next++;
            results.push(await oneRequest(model, messagesFor(`L${levelIndex}-R${i}`, nWords)));
        }
    }
    await Promise.all(Array.from({ length: Math.min(c, perLevel) }, worker));
    const wall = (performance.now() - t0) / 1000;
    const ok = results.filter((r) => r.ok);
    const ttft = ok.map((r) => r.ttft).filter((x) => x !== null);
    const gaps = ok.flatMap((r) => r.gaps);
    const tokens = ok.reduce((a, r) => a + r.tokens, 0);
    const count = (k) => results.filter((r) => r.error === k).length;
    const errorSamples = [...new Set(results.filter((r) => r.error === 'errors').map((r) => r.message))].slice(0, 3);
    return {
        concurrency: c,
        requests: results.length,
        ok: ok.length,
        rejected_429: count('rejected_429'),
        rejected_503: count('rejected_503'),
        errors: count('errors'),
        error_samples: errorSamples,
        wall_s: round(wall, 3),
        requests_per_s: round(ok.length / wall, 2),
        generated_tokens: tokens,
        generated_tokens_per_s: round(tokens / wall, 1),
        prompt_tokens_mean: round(mean(ok.map((r) => r.promptTokens).filter((x) => x !== null)), 1),
        ttft_ms: { p50: round(percentile(ttft, 50)), p95: round(percentile(ttft, 95)), mean: round(mean(ttft)),
            max: round(ttft.length ? Math.max(...ttft) : null) },
        inter_chunk_ms: { p50: round(percentile(gaps, 50), 2), p95: round(percentile(gaps, 95), 2),
            mean: round(mean(gaps), 2) },
        request_ms: { p50: round(percentile(ok.map((r) => r.ms), 50)), p95: round(percentile(ok.map((r) => r.ms), 95)) },
        server_resident_bytes: await residentBytes(),
    };
}

// ---- output -------------------------------------------------------------------------------------------

function markdown(rows) {
    const head = ['concurrency', 'requests', 'ok', '429', '503', 'errors', 'req/s', 'gen tok/s', 'TTFT p50 ms',
        'TTFT p95 ms', 'tok p50 ms', 'tok p95 ms', 'server RSS MiB'];
    const f = (x, d = 1) => (x === null || x === undefined ? '-' : x.toFixed(d));
    const lines = [`| ${head.join(' | ')} |`, `|${head.map(() => '---:').join('|')}|`];
    for (const r of rows)
        lines.push(`| ${[r.concurrency, r.requests, r.ok, r.rejected_429, r.rejected_503, r.errors,
            f(r.requests_per_s, 2), f(r.generated_tokens_per_s), f(r.ttft_ms.p50), f(r.ttft_ms.p95),
            f(r.inter_chunk_ms.p50, 2), f(r.inter_chunk_ms.p95, 2),
            r.server_resident_bytes === null ? '-' : (r.server_resident_bytes / 2 ** 20).toFixed(0)].join(' | ')} |`);
    return lines.join('\n');
}

// Ticks for [0, max]: about n intervals of 1, 2, 2.5 or 5 times a power of ten; with k, exactly k
// intervals (so that the right axis's ticks sit on the left axis's grid lines).
function ticks(max, n = 5, k = 0) {
    if (!(max > 0)) max = 1;
    const raw = max / (k || n), p = 10 ** Math.floor(Math.log10(raw));
    const step = [1, 2, 2.5, 5, 10].map((m) => m * p).find((s) => s >= raw * (1 - 1e-9));
    const count = k || Math.ceil(max / step - 1e-9);
    return Array.from({ length: count + 1 }, (_, i) => i * step);
}

const esc = (s) => String(s).replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');
const fmt = (v) => (v >= 1000 ? `${+(v / 1000).toFixed(1)}k` : `${+v.toFixed(2)}`);

function svgChart(rows, meta) {
    const W = 720, H = 440, L = 70, R = 70, T = 74, B = 60;
    const pw = W - L - R, ph = H - T - B;
    const n = rows.length;
    const x = (i) => L + (n === 1 ? pw / 2 : (i * pw) / (n - 1));
    const tps = rows.map((r) => r.generated_tokens_per_s ?? 0);
    const ttft = rows.map((r) => r.ttft_ms.p95);
    const lt = ticks(Math.max(...tps));
    const rt = ticks(Math.max(0, ...ttft.filter((v) => v !== null)), 5, lt.length - 1);
    const yl = (v) => T + ph - (v / lt[lt.length - 1]) * ph;
    const yr = (v) => T + ph - (v / rt[rt.length - 1]) * ph;
    const blue = '#1f6fd1', orange = '#e0731f';
    const o = [];
    o.push(`<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${H}" viewBox="0 0 ${W} ${H}" ` +
        `font-family="Helvetica, Arial, sans-serif" font-size="12">`);
    o.push(`<rect width="${W}" height="${H}" fill="white"/>`);
    o.push(`<text x="${W / 2}" y="22" text-anchor="middle" font-size="15" font-weight="bold">` +
        `${esc(meta.title)}</text>`);
    o.push(`<text x="${W / 2}" y="38" text-anchor="middle" fill="#555">${esc(meta.subtitle)}</text>`);
    for (const v of lt) {
        o.push(`<line x1="${L}" x2="${L + pw}" y1="${yl(v)}" y2="${yl(v)}" stroke="#e4e4e4"/>`);
        o.push(`<text x="${L - 8}" y="${yl(v) + 4}" text-anchor="end" fill="${blue}">${fmt(v)}</text>`);
    }
    for (const v of rt) o.push(`<text x="${L + pw + 8}" y="${yr(v) + 4}" fill="${orange}">${fmt(v)}</text>`);
    rows.forEach((r, i) => {
        o.push(`<line x1="${x(i)}" x2="${x(i)}" y1="${T + ph}" y2="${T + ph + 5}" stroke="#333"/>`);
        o.push(`<text x="${x(i)}" y="${T + ph + 19}" text-anchor="middle">${r.concurrency}</text>`);
    });
    o.push(`<rect x="${L}" y="${T}" width="${pw}" height="${ph}" fill="none" stroke="#333"/>`);
    o.push(`<text x="${L + pw / 2}" y="${H - 18}" text-anchor="middle">concurrent requests</text>`);
    o.push(`<text transform="translate(18 ${T + ph / 2}) rotate(-90)" text-anchor="middle" fill="${blue}">` +
        `generated tokens/s</text>`);
    o.push(`<text transform="translate(${W - 14} ${T + ph / 2}) rotate(90)" text-anchor="middle" fill="${orange}">` +
        `p95 time to first token (ms)</text>`);
    const line = (ys, color, dash) => {
        const pts = ys.map((v, i) => (v === null ? null : `${x(i).toFixed(1)},${v.toFixed(1)}`)).filter(Boolean);
        if (pts.length > 1)
            o.push(`<polyline points="${pts.join(' ')}" fill="none" stroke="${color}" stroke-width="2.5"` +
                `${dash ? ' stroke-dasharray="7 4"' : ''}/>`);
        ys.forEach((v, i) => {
            if (v !== null) o.push(`<circle cx="${x(i).toFixed(1)}" cy="${v.toFixed(1)}" r="4" fill="${color}"/>`);
        });
    };
    line(tps.map(yl), blue, false);
    line(ttft.map((v) => (v === null ? null : yr(v))), orange, true);
    // the legend: one row between the subtitle and the plot
    const lx = W / 2 - 205, ly = 56;
    o.push(`<line x1="${lx}" x2="${lx + 24}" y1="${ly}" y2="${ly}" stroke="${blue}" stroke-width="2.5"/>`);
    o.push(`<text x="${lx + 30}" y="${ly + 4}">generated tokens/s (left axis)</text>`);
    o.push(`<line x1="${lx + 240}" x2="${lx + 264}" y1="${ly}" y2="${ly}" stroke="${orange}" stroke-width="2.5" ` +
        `stroke-dasharray="7 4"/>`);
    o.push(`<text x="${lx + 270}" y="${ly + 4}">p95 TTFT, ms (right axis)</text>`);
    o.push('</svg>');
    return o.join('\n') + '\n';
}

// ---- main ---------------------------------------------------------------------------------------------

async function main() {
    let model = opts.model;
    try {
        const list = await client.models.list();
        if (!model) model = list.data[0]?.id;
    } catch (e) {
        fail(`cannot list the models at ${client.baseURL}: ${e.message}`);
    }
    if (!model) fail('the server lists no model; give --model');

    // calibrate the prompt's length: two requests tell how many tokens the template and each word make
    let nWords = promptTokens;
    try {
        const count = async (w) => (await client.chat.completions.create({
            model, messages: messagesFor('L0-R00', w), max_tokens: 1 })).usage?.prompt_tokens;
        const t1 = await count(promptTokens), t2 = await count(2 * promptTokens);
        const perWord = (t2 - t1) / promptTokens, fixed = t1 - perWord * promptTokens;
        if (perWord > 0) nWords = Math.max(1, Math.round((promptTokens - fixed) / perWord));
    } catch (e) {
        fail(`the first request failed: ${e.message}`);
    }

    const meta = {
        url: client.baseURL, metrics_url: metricsURL, model, levels, requests_per_level: perLevel,
        max_tokens: maxTokens, prompt_tokens_target: promptTokens, prompt_words: nWords, temperature,
        ignore_eos: ignoreEos, started: new Date().toISOString(), node: process.version,
        openai_client: CLIENT_VERSION,
    };
    console.error(`serve-load: ${model} at ${client.baseURL}: levels ${levels.join(',')}, ${perLevel} requests each, ` +
        `max_tokens ${maxTokens}, ~${promptTokens} prompt tokens`);
    const rows = [];
    for (const [i, c] of levels.entries()) {
        if (perLevel < c) console.error(`serve-load: note: ${perLevel} requests cannot keep ${c} in flight`);
        const row = await runLevel(model, c, nWords, i);
        rows.push(row);
        console.error(`serve-load: concurrency ${c}: ${row.ok}/${row.requests} ok, ${row.generated_tokens_per_s} tok/s, ` +
            `TTFT p95 ${row.ttft_ms.p95} ms, ${row.rejected_429 + row.rejected_503} rejected, ${row.errors} errors` +
            (row.error_samples.length ? ` (${row.error_samples[0]})` : ''));
    }
    meta.finished = new Date().toISOString();
    console.log(markdown(rows));
    if (opts.out) writeFileSync(opts.out, JSON.stringify({ meta, levels: rows }, null, 2) + '\n');
    if (opts.chart)
        writeFileSync(opts.chart, svgChart(rows, {
            title: `${model}: throughput and p95 time to first token`,
            subtitle: `${perLevel} streamed requests per level, max_tokens ${maxTokens}, ~${promptTokens} prompt tokens`,
        }));
}

main().catch((e) => {
    console.error(`serve-load: ${e?.stack ?? e}`);
    process.exit(1);
});
