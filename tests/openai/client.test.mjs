// lilac serve against the official `openai` npm client, used as a user
// would use it: the client's own calls, types and errors, no hand-made HTTP
// (but for /health and /metrics, which are lilac's own).
//
//   node --test-reporter=spec client.test.mjs LILAC_BINARY MODEL.gguf
//   (or LILAC_BIN=... LILAC_MODEL=... node client.test.mjs)
//
// tests/cli_openai.sh installs the client (npm ci) and runs this file. It
// starts `lilac serve -m MODEL --port 0 --no-supervise --ctx 1024
// --parallel 2` (and a second server with --api-key), reads the port from the
// {"event":"listening",...,"port":N} line on its stderr, waits for /health,
// runs the checks in order, and stops the servers at the end (SIGTERM, then
// SIGKILL; also when a check fails or this process is interrupted).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { createInterface } from 'node:readline';
import { basename } from 'node:path';
import { existsSync } from 'node:fs';
import OpenAI from 'openai';

const LILAC = process.argv[2] || process.env.LILAC_BIN;
const MODEL = process.argv[3] || process.env.LILAC_MODEL;
const CTX = 1024;
const API_KEY = 'secret';
const T = { timeout: 120_000 }; // per test: a hang fails the test instead of the whole run

if (!LILAC || !MODEL || !existsSync(LILAC) || !existsSync(MODEL)) {
    console.error(`usage: node client.test.mjs LILAC_BINARY MODEL.gguf (got ${LILAC}, ${MODEL})`);
    process.exit(2);
}

// ---- the servers ----------------------------------------------------------------------------------------

const servers = [];

function killAll(signal) {
    for (const s of servers)
        if (!s.exit) {
            try {
                s.child.kill(signal);
            } catch {
                /* already gone */
            }
        }
}
process.on('exit', () => killAll('SIGKILL'));
for (const sig of ['SIGINT', 'SIGTERM', 'SIGHUP'])
    process.on(sig, () => {
        killAll('SIGKILL');
        console.error(`client.test: stopped by ${sig}`);
        process.exit(1);
    });

function withTimeout(promise, ms, what) {
    let timer;
    const t = new Promise((_, reject) => {
        timer = setTimeout(() => reject(new Error(`timed out after ${ms} ms: ${what}`)), ms);
    });
    return Promise.race([promise, t]).finally(() => clearTimeout(timer));
}

async function startServer(name, extra = []) {
    const args = ['serve', '-m', MODEL, '--port', '0', '--no-supervise', '--ctx', String(CTX), '--parallel', '2',
        ...extra];
    const env = { ...process.env };
    delete env.LILAC_API_KEY; // the key, when wanted, comes by --api-key
    const child = spawn(LILAC, args, { stdio: ['ignore', 'ignore', 'pipe'], env });
    const s = { name, child, args, log: [], exit: null, port: 0 };
    servers.push(s);
    s.exited = new Promise((resolve) => {
        child.on('exit', (code, signal) => resolve((s.exit = { code, signal })));
        child.on('error', (err) => resolve((s.exit = { code: null, signal: null, error: err })));
    });
    const listening = new Promise((resolve) => {
        createInterface({ input: child.stderr }).on('line', (line) => {
            s.log.push(line);
            if (s.log.length > 400) s.log.splice(0, 100);
            let ev;
            try {
                ev = JSON.parse(line);
            } catch {
                return;
            }
            if (ev && ev.event === 'listening' && Number.isInteger(ev.port)) resolve(ev.port);
        });
    });
    const died = s.exited.then((x) => {
        throw new Error(`${name}: lilac serve exited before listening (${JSON.stringify(x)})\n${s.log.join('\n')}`);
    });
    s.port = await withTimeout(Promise.race([listening, died]), 30_000, `${name}: the "listening" line`);
    s.base = `http://127.0.0.1:${s.port}`;
    // /health: 503 while loading, 200 when ready
    const deadline = Date.now() + 60_000;
    for (;;) {
        if (s.exit) throw new Error(`${name}: lilac serve exited while loading\n${s.log.join('\n')}`);
        try {
            const r = await fetch(`${s.base}/health`);
            const body = await r.text();
            if (r.status === 200) {
                assert.deepEqual(JSON.parse(body), { status: 'ready' });
                break;
            }
        } catch {
            /* not accepting yet */
        }
        if (Date.now() > deadline) throw new Error(`${name}: /health never said 200\n${s.log.join('\n')}`);
        await new Promise((r) => setTimeout(r, 100));
    }
    return s;
}

async function stopServer(s, ms = 20_000) {
    if (s.exit) return s.exit;
    s.child.kill('SIGTERM');
    try {
        return await withTimeout(s.exited, ms, `${s.name} to exit after SIGTERM`);
    } catch (e) {
        s.child.kill('SIGKILL');
        await s.exited;
        throw e;
    }
}

async function metric(s, name) {
    const text = await (await fetch(`${s.base}/metrics`)).text();
    const m = text.match(new RegExp(`^${name}(?:\\{[^}]*\\})? ([0-9.eE+-]+)$`, 'm'));
    return m ? Number(m[1]) : undefined;
}

// A failed check prints the servers' last log lines (after all checks).
let failed = false;
function check(name, fn) {
    test(name, T, async (t) => {
        try {
            await fn(t);
        } catch (e) {
            failed = true;
            throw e;
        }
    });
}

let srv, authSrv, client, model;

before(async () => {
    srv = await startServer('server');
    authSrv = await startServer('server with --api-key', ['--api-key', API_KEY]);
    client = new OpenAI({ baseURL: `${srv.base}/v1`, apiKey: 'x', maxRetries: 0, timeout: 60_000 });
});

after(async () => {
    killAll('SIGKILL');
    if (failed)
        for (const s of servers)
            console.error(`---- ${s.name} (${s.args.join(' ')}): last log lines ----\n${s.log.slice(-40).join('\n')}`);
});

// ---- helpers --------------------------------------------------------------------------------------------

const MESSAGES = [
    { role: 'system', content: 'You are a helpful assistant.' },
    { role: 'user', content: 'Tell me one thing about llamas.' },
];

function checkUsage(u, maxTokens, finish, what) {
    assert.ok(u, `${what}: usage is there`);
    for (const k of ['prompt_tokens', 'completion_tokens', 'total_tokens'])
        assert.ok(Number.isInteger(u[k]) && u[k] >= 0, `${what}: usage.${k} is a count (${u[k]})`);
    assert.ok(u.prompt_tokens > 0, `${what}: prompt_tokens > 0`);
    assert.equal(u.total_tokens, u.prompt_tokens + u.completion_tokens, `${what}: total = prompt + completion`);
    assert.ok(u.completion_tokens <= maxTokens, `${what}: completion_tokens ${u.completion_tokens} <= ${maxTokens}`);
    if (finish === 'length') assert.equal(u.completion_tokens, maxTokens, `${what}: "length" means max_tokens`);
    const cached = u.prompt_tokens_details?.cached_tokens;
    if (cached !== undefined) assert.ok(cached >= 0 && cached <= u.prompt_tokens, `${what}: 0 <= cached <= prompt`);
}

// An error the client threw: its class, status and the fields it exposes from the body.
function expectError(cls, status, code, param) {
    return (e) => {
        assert.ok(e instanceof cls, `expected ${cls.name}, got ${e?.constructor?.name}: ${e?.message}`);
        assert.ok(e instanceof OpenAI.APIError);
        assert.equal(e.status, status);
        assert.equal(typeof e.error?.message, 'string', 'e.error.message');
        assert.ok(e.error.message.length > 0);
        assert.equal(typeof e.type, 'string', 'e.type');
        if (code !== undefined) assert.equal(e.code, code, `e.code (message: ${e.error.message})`);
        if (param !== undefined) assert.equal(e.param, param, 'e.param');
        assert.ok(e.message.startsWith(`${status} `), `e.message: ${e.message}`);
        return true;
    };
}

// The chunks of a streamed chat completion, checked; returns {content, finish, usage, chunks}.
async function readChatStream(stream, { includeUsage }) {
    const chunks = [];
    for await (const ch of stream) chunks.push(ch);
    assert.ok(chunks.length >= 2, `at least two chunks (got ${chunks.length})`);
    const id = chunks[0].id;
    let usageChunk = null;
    if (includeUsage) {
        usageChunk = chunks.pop();
        assert.deepEqual(usageChunk.choices, [], 'the usage chunk has no choices');
        assert.ok(usageChunk.usage, 'the last chunk carries usage');
        assert.equal(usageChunk.id, id);
    }
    let content = '', finish = null, nFinish = 0;
    chunks.forEach((ch, i) => {
        assert.equal(ch.object, 'chat.completion.chunk');
        assert.equal(ch.id, id, 'one id for all chunks');
        assert.equal(typeof ch.created, 'number');
        assert.equal(typeof ch.model, 'string');
        if (includeUsage) assert.equal(ch.usage, null, `chunk ${i}: usage is null before the last chunk`);
        else assert.ok(ch.usage == null, `chunk ${i}: no usage without include_usage`);
        assert.equal(ch.choices.length, 1);
        const c = ch.choices[0];
        assert.equal(c.index, 0);
        if (i === 0) assert.equal(c.delta.role, 'assistant', 'the first delta has the role');
        if (c.delta.content != null) {
            assert.equal(typeof c.delta.content, 'string');
            content += c.delta.content;
        }
        if (c.finish_reason != null) {
            nFinish++;
            finish = c.finish_reason;
            assert.equal(i, chunks.length - 1, 'finish_reason comes on the last choice chunk');
        }
    });
    assert.equal(nFinish, 1, 'exactly one chunk has a finish_reason');
    return { content, finish, usage: usageChunk?.usage, chunks };
}

// ---- the checks -----------------------------------------------------------------------------------------

check('models.list() has the model', async () => {
    const page = await client.models.list();
    assert.ok(Array.isArray(page.data) && page.data.length >= 1);
    const ids = page.data.map((m) => m.id);
    assert.ok(ids.includes(basename(MODEL)), `the model's file name in ${JSON.stringify(ids)}`);
    for (const m of page.data) {
        assert.equal(m.object, 'model');
        assert.equal(typeof m.created, 'number');
        assert.equal(typeof m.owned_by, 'string');
    }
    const seen = [];
    for await (const m of client.models.list()) seen.push(m.id); // the client's auto-paging iterator
    assert.deepEqual(seen, ids);
    model = basename(MODEL);
});

let plainContent; // temperature 0: the streamed text must be the same

check('chat.completions.create: a whole answer', async () => {
    const r = await client.chat.completions.create({ model, messages: MESSAGES, max_tokens: 16, temperature: 0 });
    assert.equal(r.object, 'chat.completion');
    assert.ok(typeof r.id === 'string' && r.id.length > 0);
    assert.equal(typeof r.created, 'number');
    assert.equal(r.model, model);
    assert.equal(r.choices.length, 1);
    const c = r.choices[0];
    assert.equal(c.index, 0);
    assert.equal(c.message.role, 'assistant');
    assert.equal(typeof c.message.content, 'string');
    assert.ok(['stop', 'length'].includes(c.finish_reason), `finish_reason ${c.finish_reason}`);
    checkUsage(r.usage, 16, c.finish_reason, 'chat');
    assert.ok(r.usage.completion_tokens > 0, 'some tokens were generated');
    plainContent = c.message.content;

    // the same request again: the same answer (the prompt may now come from the prefix cache)
    const again = await client.chat.completions.create({ model, messages: MESSAGES, max_tokens: 16, temperature: 0 });
    assert.equal(again.choices[0].message.content, plainContent, 'temperature 0 repeats itself');
    assert.notEqual(again.id, r.id, 'each response has its own id');
    checkUsage(again.usage, 16, again.choices[0].finish_reason, 'chat, again');
    assert.equal(again.usage.prompt_tokens, r.usage.prompt_tokens);

    // the next turn of the conversation: its prompt begins with this one's, which the server reuses
    const next = await client.chat.completions.create({
        model, max_tokens: 4, temperature: 0,
        messages: [...MESSAGES, { role: 'assistant', content: plainContent }, { role: 'user', content: 'More.' }],
    });
    checkUsage(next.usage, 4, next.choices[0].finish_reason, 'next turn');
    assert.ok(next.usage.prompt_tokens > r.usage.prompt_tokens);
    assert.ok(next.usage.prompt_tokens_details?.cached_tokens > 0,
        `the next turn reuses the conversation so far (cached_tokens ${next.usage.prompt_tokens_details?.cached_tokens})`);
});

check('chat.completions.create: stream with stream_options.include_usage', async () => {
    const stream = await client.chat.completions.create({
        model, messages: MESSAGES, max_tokens: 16, temperature: 0, stream: true,
        stream_options: { include_usage: true },
    });
    const { content, finish, usage } = await readChatStream(stream, { includeUsage: true });
    assert.ok(content.length > 0 || finish, 'some content or a finish_reason');
    assert.ok(['stop', 'length'].includes(finish), `finish_reason ${finish}`);
    checkUsage(usage, 16, finish, 'stream');
    if (plainContent !== undefined) assert.equal(content, plainContent, 'streamed text = the whole answer\'s text');
});

check('chat.completions.create: stream without usage', async () => {
    const stream = await client.chat.completions.create({
        model, messages: MESSAGES, max_tokens: 4, temperature: 0, stream: true,
    });
    const { finish } = await readChatStream(stream, { includeUsage: false });
    assert.ok(['stop', 'length'].includes(finish));
});

check('chat.completions.stream() helper assembles the final completion', async () => {
    const runner = client.chat.completions.stream({
        model, messages: MESSAGES, max_tokens: 16, temperature: 0, stream_options: { include_usage: true },
    });
    let deltas = '';
    runner.on('content', (d) => (deltas += d));
    const final = await runner.finalChatCompletion();
    const c = final.choices[0];
    assert.equal(c.message.role, 'assistant');
    assert.equal(typeof c.message.content, 'string');
    assert.equal(c.message.content, deltas);
    if (plainContent !== undefined) assert.equal(c.message.content, plainContent);
    assert.ok(['stop', 'length'].includes(c.finish_reason));
    checkUsage(final.usage, 16, c.finish_reason, 'stream helper');
});

check('completions.create: whole, streamed, with logprobs', async () => {
    const prompt = 'Once upon a time';
    const r = await client.completions.create({ model, prompt, max_tokens: 8, temperature: 0 });
    assert.equal(r.object, 'text_completion');
    assert.ok(typeof r.id === 'string' && r.id.length > 0);
    assert.equal(r.choices.length, 1);
    const c = r.choices[0];
    assert.equal(c.index, 0);
    assert.equal(typeof c.text, 'string');
    assert.ok(['stop', 'length'].includes(c.finish_reason));
    checkUsage(r.usage, 8, c.finish_reason, 'completion');

    const stream = await client.completions.create({
        model, prompt, max_tokens: 8, temperature: 0, stream: true, stream_options: { include_usage: true },
    });
    let text = '', finish = null, usage = null, n = 0;
    for await (const ch of stream) {
        n++;
        assert.equal(ch.object, 'text_completion');
        if (ch.usage) usage = ch.usage;
        for (const x of ch.choices) {
            text += x.text;
            if (x.finish_reason) finish = x.finish_reason;
        }
    }
    assert.ok(n >= 2);
    assert.equal(text, c.text, 'streamed text = the whole answer\'s text');
    assert.equal(finish, c.finish_reason);
    checkUsage(usage, 8, finish, 'completion stream');

    const lp = await client.completions.create({ model, prompt, max_tokens: 4, temperature: 0, logprobs: 2 });
    const l = lp.choices[0].logprobs;
    assert.ok(l, 'choices[0].logprobs');
    assert.equal(l.tokens.length, lp.usage.completion_tokens);
    assert.equal(l.token_logprobs.length, l.tokens.length);
    assert.equal(l.top_logprobs.length, l.tokens.length);
    assert.equal(l.text_offset.length, l.tokens.length);
    for (let i = 0; i < l.tokens.length; i++) {
        assert.ok(l.token_logprobs[i] <= 0);
        const alts = Object.keys(l.top_logprobs[i]).length;
        assert.ok(alts >= 1 && alts <= 2, `top_logprobs[${i}] has 1..2 alternatives`);
        if (i > 0) assert.ok(l.text_offset[i] >= l.text_offset[i - 1]);
    }
});

check('tools: a get_weather function and a tool call in the history', async () => {
    const tools = [{
        type: 'function',
        function: {
            name: 'get_weather',
            description: 'The current weather in a city',
            parameters: {
                type: 'object',
                properties: { city: { type: 'string' }, unit: { type: 'string', enum: ['celsius', 'fahrenheit'] } },
                required: ['city'],
            },
        },
    }];
    const messages = [
        { role: 'user', content: 'What is the weather in Paris?' },
        {
            role: 'assistant', content: null,
            tool_calls: [{ id: 'call_1', type: 'function',
                function: { name: 'get_weather', arguments: '{"city":"Paris","unit":"celsius"}' } }],
        },
        { role: 'tool', tool_call_id: 'call_1', content: '{"temperature":18,"sky":"cloudy"}' },
        { role: 'user', content: 'And in Rome?' },
    ];
    const wellFormed = (c, what) => {
        assert.ok(['stop', 'length', 'tool_calls'].includes(c.finish_reason), `${what}: finish_reason ${c.finish_reason}`);
        assert.equal(c.message.role, 'assistant');
        assert.ok(c.message.content === null || typeof c.message.content === 'string');
        const calls = c.message.tool_calls ?? [];
        if (c.finish_reason === 'tool_calls') assert.ok(calls.length > 0, `${what}: "tool_calls" with no calls`);
        for (const tc of calls) {
            assert.equal(tc.type, 'function');
            assert.ok(typeof tc.id === 'string' && tc.id.length > 0);
            assert.ok(typeof tc.function.name === 'string' && tc.function.name.length > 0);
            assert.doesNotThrow(() => JSON.parse(tc.function.arguments), `${what}: arguments are JSON`);
        }
    };
    for (const temperature of [0, 1]) {
        const r = await client.chat.completions.create({ model, messages, tools, max_tokens: 24, temperature, seed: 7 });
        wellFormed(r.choices[0], `temperature ${temperature}`);
        checkUsage(r.usage, 24, r.choices[0].finish_reason === 'length' ? 'length' : 'stop', 'tools');
    }
    // the tools and the history are in the prompt
    const bare = await client.chat.completions.create({ model, messages: [messages[0]], max_tokens: 1 });
    const full = await client.chat.completions.create({ model, messages, tools, max_tokens: 1 });
    assert.ok(full.usage.prompt_tokens > bare.usage.prompt_tokens + 20,
        `tools and history make the prompt longer (${full.usage.prompt_tokens} vs ${bare.usage.prompt_tokens})`);
    // streamed, through the client's helper that assembles tool call deltas
    const final = await client.chat.completions
        .stream({ model, messages, tools, max_tokens: 24, temperature: 1, seed: 7 })
        .finalChatCompletion();
    wellFormed(final.choices[0], 'streamed');
});

check('logprobs: true with top_logprobs: 2', async () => {
    const r = await client.chat.completions.create({
        model, messages: MESSAGES, max_tokens: 8, temperature: 0, logprobs: true, top_logprobs: 2,
    });
    const lp = r.choices[0].logprobs;
    assert.ok(lp && Array.isArray(lp.content), 'choices[0].logprobs.content');
    assert.equal(lp.content.length, r.usage.completion_tokens, 'one entry per generated token');
    assert.ok(lp.content.length > 0);
    for (const [i, e] of lp.content.entries()) {
        assert.equal(typeof e.token, 'string');
        assert.ok(Number.isFinite(e.logprob) && e.logprob <= 0, `content[${i}].logprob ${e.logprob}`);
        assert.ok(Array.isArray(e.bytes) && e.bytes.every((b) => Number.isInteger(b) && b >= 0 && b < 256));
        assert.equal(e.top_logprobs.length, 2, `content[${i}] has 2 top_logprobs`);
        const [a, b] = e.top_logprobs;
        assert.ok(a.logprob >= b.logprob, 'top_logprobs are most likely first');
        assert.ok(a.logprob >= e.logprob - 1e-6, 'no alternative above the first');
        // temperature 0 picks the most likely token
        assert.ok(Math.abs(a.logprob - e.logprob) < 1e-5, `greedy: the chosen token is the first alternative (${i})`);
    }

    // streamed: the entries come with the chunks, one per token in all
    const stream = await client.chat.completions.create({
        model, messages: MESSAGES, max_tokens: 8, temperature: 0, logprobs: true, top_logprobs: 2, stream: true,
        stream_options: { include_usage: true },
    });
    const { chunks, usage } = await readChatStream(stream, { includeUsage: true });
    const entries = chunks.flatMap((ch) => ch.choices[0].logprobs?.content ?? []);
    assert.equal(entries.length, usage.completion_tokens, 'streamed: one entry per generated token');
    assert.deepEqual(entries.map((e) => e.token), lp.content.map((e) => e.token));
});

check('errors: messages: [] is a BadRequestError', async () => {
    await assert.rejects(client.chat.completions.create({ model, messages: [] }),
        expectError(OpenAI.BadRequestError, 400, 'empty_array', 'messages'));
    await assert.rejects(client.chat.completions.create({ model, messages: [], stream: true }),
        expectError(OpenAI.BadRequestError, 400, 'empty_array', 'messages'));
    await assert.rejects(client.chat.completions.create({ model, messages: MESSAGES, temperature: 5 }),
        expectError(OpenAI.BadRequestError, 400, undefined, 'temperature'));
});

check('errors: a prompt over the context is context_length_exceeded', async () => {
    const long = [{ role: 'user', content: 'hello '.repeat(2 * CTX) }];
    await assert.rejects(client.chat.completions.create({ model, messages: long, max_tokens: 4 }),
        expectError(OpenAI.BadRequestError, 400, 'context_length_exceeded'));
    await assert.rejects(client.chat.completions.create({ model, messages: long, max_tokens: 4, stream: true }),
        expectError(OpenAI.BadRequestError, 400, 'context_length_exceeded'));
    await assert.rejects(client.completions.create({ model, prompt: 'hello '.repeat(2 * CTX), max_tokens: 4 }),
        expectError(OpenAI.BadRequestError, 400, 'context_length_exceeded'));
});

check('errors: max_tokens over the context is context_length_exceeded', async () => {
    await assert.rejects(client.chat.completions.create({ model, messages: MESSAGES, max_tokens: 2 * CTX }),
        expectError(OpenAI.BadRequestError, 400, 'context_length_exceeded'));
    await assert.rejects(client.completions.create({ model, prompt: 'Once upon a time', max_tokens: 2 * CTX }),
        expectError(OpenAI.BadRequestError, 400, 'context_length_exceeded'));
});

check('a client that leaves mid-stream frees its slot; four requests share two slots', async () => {
    const stream = await client.chat.completions.create({
        model, messages: MESSAGES, max_tokens: 500, stream: true, ignore_eos: true,
    });
    let n = 0;
    for await (const _ of stream) if (++n >= 3) break; // closes the connection
    const deadline = Date.now() + 15_000;
    let busy;
    while ((busy = await metric(srv, 'lilac_busy_slots')) !== 0 && Date.now() < deadline)
        await new Promise((r) => setTimeout(r, 100));
    assert.equal(busy, 0, 'lilac_busy_slots back to 0 after the client left');

    const rs = await Promise.all([0, 1, 2, 3].map((i) =>
        client.chat.completions.create({ model, messages: MESSAGES, max_tokens: 8, temperature: 1, seed: i })));
    for (const r of rs) checkUsage(r.usage, 8, r.choices[0].finish_reason, 'concurrent');
});

check('--api-key: a wrong key is an AuthenticationError, the right one works', async () => {
    const base = `${authSrv.base}/v1`;
    const wrong = new OpenAI({ baseURL: base, apiKey: 'wrong', maxRetries: 0 });
    await assert.rejects(wrong.models.list(), expectError(OpenAI.AuthenticationError, 401));
    await assert.rejects(wrong.chat.completions.create({ model, messages: MESSAGES, max_tokens: 2 }),
        expectError(OpenAI.AuthenticationError, 401));
    const right = new OpenAI({ baseURL: base, apiKey: API_KEY, maxRetries: 0 });
    const ids = (await right.models.list()).data.map((m) => m.id);
    assert.ok(ids.includes(model));
    const r = await right.chat.completions.create({ model, messages: MESSAGES, max_tokens: 4 });
    checkUsage(r.usage, 4, r.choices[0].finish_reason, 'with the key');
    const stream = await right.chat.completions.create({
        model, messages: MESSAGES, max_tokens: 4, stream: true, stream_options: { include_usage: true },
    });
    await readChatStream(stream, { includeUsage: true });
    assert.equal((await fetch(`${authSrv.base}/health`)).status, 200, '/health needs no key');
    assert.ok(!authSrv.log.some((l) => l.includes(API_KEY)), 'the key is not in the log');
});

check('SIGTERM: both servers drain and exit with status 0', async () => {
    for (const s of [srv, authSrv]) {
        const x = await stopServer(s);
        assert.deepEqual({ code: x.code, signal: x.signal }, { code: 0, signal: null }, `${s.name} exit`);
    }
});
