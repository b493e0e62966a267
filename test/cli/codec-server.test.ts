/**
 * `sideeffect codec-server` on a real socket, with the AES-GCM codec the Temporal tests use:
 * Temporal's protocol (encode and decode round trip, codecs chained as the SDK chains them, CORS
 * for the UI's origin) and every malformed request refused with a status and a JSON error code
 * while the server keeps serving. It decrypts, so every request needs its token: `curl` from
 * another process is refused without it, with or without an Origin; the namespace, concurrent
 * requests and bytes in flight are capped. The UI itself drives it in test/e2e/ui-codec.test.ts.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import type { Payload, PayloadCodec } from '@temporalio/common';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  type CodecServer,
  MAX_BODY_BYTES,
  parsePayloads,
  startCodecServer,
} from '../../src/cli/codec-server.js';
import { main } from '../../src/cli/main.js';
import { ENCRYPTED, encryptionCodec } from '../support/encryption-codec.js';
import { REPO_ROOT, TEMPORAL_UI_URL } from '../support/temporal.js';

const TOKEN = 'a3f9c1e07b5d42c8a1e6f0b9d2c47e13';
const AUTH = { Authorization: `Bearer ${TOKEN}` };

/** `curl` in its own process, as any local program would call the server: status and body. */
function curl(
  url: string,
  body: string,
  headers: Record<string, string> = {},
): Promise<{ status: number; body: string }> {
  const child = spawn(
    'curl',
    [
      '-s',
      '-X',
      'POST',
      '-H',
      'Content-Type: application/json',
      ...Object.entries(headers).flatMap(([name, value]) => ['-H', `${name}: ${value}`]),
      '--data-binary',
      '@-',
      '-w',
      '\\n%{http_code}',
      url,
    ],
    { stdio: ['pipe', 'pipe', 'inherit'] },
  );
  child.stdin.end(body);
  let stdout = '';
  child.stdout.on('data', (chunk: Buffer) => {
    stdout += chunk.toString();
  });
  return new Promise((resolve, reject) => {
    child.once('error', reject);
    child.once('close', () => {
      const at = stdout.lastIndexOf('\n');
      resolve({ status: Number(stdout.slice(at + 1)), body: stdout.slice(0, at) });
    });
  });
}

/** The UI's origin, as the browser sends it. */
const UI = new URL(TEMPORAL_UI_URL).origin;
const b64 = (text: string) => Buffer.from(text).toString('base64');
const json = (value: unknown) => ({
  metadata: { encoding: b64('json/plain') },
  data: b64(JSON.stringify(value)),
});

/** Appends `tag` to each payload's data on encode and takes it off on decode (refusing otherwise). */
function tagging(tag: string): PayloadCodec {
  return {
    async encode(payloads: Payload[]) {
      return payloads.map((p) => ({
        ...p,
        data: Buffer.concat([p.data ?? Buffer.alloc(0), Buffer.from(tag)]),
      }));
    },
    async decode(payloads: Payload[]) {
      return payloads.map((p) => {
        const data = Buffer.from(p.data ?? new Uint8Array());
        if (!data.toString().endsWith(tag)) throw new Error(`not tagged ${tag}`);
        return { ...p, data: data.subarray(0, data.length - tag.length) };
      });
    },
  };
}

/** A 200 answer's payloads or a refusal's error: the test reads whichever the case expects. */
interface Answer {
  payloads: { metadata: Record<string, string>; data: string }[];
  error: { code: string; message: string };
}

let server: CodecServer;
let chained: CodecServer;
const lines: string[] = [];

beforeAll(async () => {
  const common = {
    host: '127.0.0.1',
    port: 0,
    corsOrigins: [UI],
    token: TOKEN,
    log: (l: string) => lines.push(l),
  };
  server = await startCodecServer({ ...common, codecs: [encryptionCodec], namespace: 'payments' });
  chained = await startCodecServer({ ...common, codecs: [tagging('<a>'), tagging('<b>')] });
});

afterAll(async () => {
  await server?.close();
  await chained?.close();
});

async function post(
  url: string,
  body: unknown,
  headers: Record<string, string> = {},
): Promise<{ status: number; body: Answer; headers: Headers }> {
  const response = await fetch(url, {
    method: 'POST',
    headers: {
      'Content-Type': 'application/json',
      'X-Namespace': 'payments',
      ...AUTH,
      ...headers,
    },
    body: typeof body === 'string' ? body : JSON.stringify(body),
  });
  return {
    status: response.status,
    body: (await response.json()) as Answer,
    headers: response.headers,
  };
}

describe('sideeffect codec-server', () => {
  it('encrypts what /encode gets and /decode gives it back; plain payloads pass through decode', async () => {
    const verdict = { applied: true, result: 'charged', reason: 'seen at the bank' };
    const encoded = await post(`${server.url}/encode`, { payloads: [json(verdict)] });
    expect(encoded.status).toBe(200);
    expect(encoded.headers.get('content-type')).toBe('application/json');
    expect(encoded.body.payloads).toHaveLength(1);
    expect(Buffer.from(encoded.body.payloads[0]!.metadata.encoding!, 'base64').toString()).toBe(
      ENCRYPTED,
    );
    expect(Buffer.from(encoded.body.payloads[0]!.data, 'base64').toString()).not.toContain('bank');

    // As the UI asks: a query string, under a proxy's prefix too.
    const decoded = await post(`${server.url}/codec/decode?preserveStorageRefs=true`, {
      payloads: [encoded.body.payloads[0], json('plain')],
    });
    expect(decoded.status).toBe(200);
    expect(decoded.body).toEqual({ payloads: [json(verdict), json('plain')] });
    // Empty data and missing metadata are payloads too (protobuf JSON leaves defaults out).
    expect((await post(`${server.url}/decode`, { payloads: [{}] })).body).toEqual({
      payloads: [{ metadata: {}, data: '' }],
    });
  });

  it('encodes through the codecs in order and decodes in reverse, as the SDK does', async () => {
    const encoded = await post(`${chained.url}/encode`, { payloads: [json(1)] });
    expect(Buffer.from(encoded.body.payloads[0]!.data, 'base64').toString()).toBe('1<a><b>');
    expect((await post(`${chained.url}/decode`, encoded.body)).body).toEqual({
      payloads: [json(1)],
    });
  });

  it('answers the UI origin, preflight included, and refuses other browser origins', async () => {
    const preflight = await fetch(`${server.url}/decode`, {
      method: 'OPTIONS',
      headers: {
        Origin: UI,
        'Access-Control-Request-Method': 'POST',
        'Access-Control-Request-Headers': 'content-type,x-namespace',
        'Access-Control-Request-Private-Network': 'true',
      },
    });
    expect(preflight.status).toBe(204);
    expect(preflight.headers.get('access-control-allow-origin')).toBe(UI);
    expect(preflight.headers.get('access-control-allow-methods')).toContain('POST');
    expect(preflight.headers.get('access-control-allow-headers')).toMatch(/X-Namespace/i);
    expect(preflight.headers.get('access-control-allow-headers')).toMatch(/Content-Type/i);
    expect(preflight.headers.get('access-control-allow-private-network')).toBe('true');

    const allowed = await post(`${server.url}/decode`, { payloads: [] }, { Origin: UI });
    expect(allowed.status).toBe(200);
    expect(allowed.headers.get('access-control-allow-origin')).toBe(UI);
    expect(allowed.headers.get('vary')).toBe('Origin');

    const evil = 'http://evil.example';
    const other = await post(`${server.url}/decode`, { payloads: [] }, { Origin: evil });
    expect(other.status).toBe(403);
    expect(other.body.error.code).toBe('ORIGIN_NOT_ALLOWED');
    expect(other.headers.get('access-control-allow-origin')).toBeNull();
    const otherPreflight = await fetch(`${server.url}/decode`, {
      method: 'OPTIONS',
      headers: { Origin: evil, 'Access-Control-Request-Method': 'POST' },
    });
    expect(otherPreflight.status).toBe(403);
    expect(otherPreflight.headers.get('access-control-allow-origin')).toBeNull();
  });

  // What was sent, the status and the error code it gets.
  const tampered = async () => {
    const { body } = await post(`${server.url}/encode`, { payloads: [json('x')] });
    const data = Buffer.from(body.payloads[0]!.data, 'base64');
    data[data.length - 1]! ^= 1;
    return { payloads: [{ ...body.payloads[0]!, data: data.toString('base64') }] };
  };
  const refused: Array<[string, () => unknown, number, string]> = [
    ['not JSON', () => '{"payloads": [', 400, 'INVALID_JSON'],
    ['an empty body', () => '', 400, 'INVALID_JSON'],
    ['an array', () => [json(1)], 400, 'INVALID_REQUEST'],
    ['no payloads', () => ({ payload: [] }), 400, 'INVALID_REQUEST'],
    ['payloads not a list', () => ({ payloads: {} }), 400, 'INVALID_REQUEST'],
    ['a payload that is a string', () => ({ payloads: ['x'] }), 400, 'INVALID_PAYLOAD'],
    ['metadata a list', () => ({ payloads: [{ metadata: [], data: '' }] }), 400, 'INVALID_PAYLOAD'],
    [
      'metadata a number',
      () => ({ payloads: [{ metadata: { encoding: 7 } }] }),
      400,
      'INVALID_PAYLOAD',
    ],
    ['data not base64', () => ({ payloads: [{ data: 'not base64!' }] }), 400, 'INVALID_PAYLOAD'],
    ['data a number', () => ({ payloads: [{ data: 12 }] }), 400, 'INVALID_PAYLOAD'],
    [
      'data of impossible length',
      () => ({ payloads: [{ data: 'abcde' }] }),
      400,
      'INVALID_PAYLOAD',
    ],
    ['a tampered ciphertext', tampered, 400, 'CODEC_FAILED'],
  ];
  it.each(refused)(
    'refuses %s with a JSON error and keeps serving',
    async (_, body, status, code) => {
      const response = await post(`${server.url}/decode`, await body());
      expect(response.status).toBe(status);
      expect(response.body).toEqual({ error: { code, message: expect.any(String) } });
      expect((await post(`${server.url}/decode`, { payloads: [json(2)] })).status).toBe(200);
    },
  );

  it('refuses other methods, paths, namespaces and oversized bodies', async () => {
    const get = await fetch(`${server.url}/decode`, { headers: AUTH });
    expect([get.status, ((await get.json()) as Answer).error.code]).toEqual([
      405,
      'METHOD_NOT_ALLOWED',
    ]);
    const elsewhere = await post(`${server.url}/transcode`, { payloads: [] });
    expect([elsewhere.status, elsewhere.body.error.code]).toEqual([404, 'NOT_FOUND']);
    const large = await post(`${server.url}/decode`, 'x'.repeat(MAX_BODY_BYTES + 1));
    expect([large.status, large.body.error.code]).toEqual([413, 'TOO_LARGE']);
    expect((await post(`${server.url}/decode`, { payloads: [json(3)] })).status).toBe(200);
    // Each refusal is logged for the person running it, without payload contents.
    expect(lines.join('\n')).toMatch(/refused \(413 TOO_LARGE\)/);
  });

  it('a codec returning the wrong number of payloads is a server error, not a crash', async () => {
    const broken = await startCodecServer({
      host: '127.0.0.1',
      port: 0,
      corsOrigins: [],
      token: TOKEN,
      codecs: [{ encode: async () => [], decode: async (p: Payload[]) => p }],
      log: () => {},
    });
    try {
      const response = await post(`${broken.url}/encode`, { payloads: [json(1)] });
      expect([response.status, response.body.error.code]).toEqual([500, 'CODEC_FAILED']);
    } finally {
      await broken.close();
    }
  });

  it('decrypts for no one without the token: curl from another process, with or without Origin', async () => {
    const body = JSON.stringify({ payloads: [json({ card: '4111111111111111' })] });
    const encrypted = await post(`${server.url}/encode`, body);
    const sealed = JSON.stringify(encrypted.body);
    const ns = { 'X-Namespace': 'payments' };
    for (const [what, headers, url] of [
      ['no token', ns, `${server.url}/decode`],
      ['no token, the UI origin', { ...ns, Origin: UI }, `${server.url}/decode`],
      [
        'a wrong bearer',
        { ...ns, Authorization: `Bearer ${TOKEN.replace('a', 'b')}` },
        `${server.url}/decode`,
      ],
      [
        'a prefix of the token',
        { ...ns, Authorization: `Bearer ${TOKEN.slice(0, 16)}` },
        `${server.url}/decode`,
      ],
      ['the token as Basic', { ...ns, Authorization: `Basic ${TOKEN}` }, `${server.url}/decode`],
      ['a wrong token in the path', ns, `${server.url}/${TOKEN.slice(1)}x/decode`],
      ['the token as a query', ns, `${server.url}/decode?token=${TOKEN}`],
    ] as const) {
      const refused = await curl(url, sealed, headers);
      expect(refused.status, what).toBe(401);
      expect(JSON.parse(refused.body).error.code, what).toBe('UNAUTHORIZED');
      expect(refused.body, what).not.toContain('4111');
    }
    // /encode too: a verdict the app's codec would accept is a credential's work.
    const forged = await curl(`${server.url}/encode`, body, ns);
    expect([forged.status, JSON.parse(forged.body).error.code]).toEqual([401, 'UNAUTHORIZED']);
    expect(
      (await curl(`${server.url}/decode`, sealed, ns)).body,
      'the message says how to give the token',
    ).toMatch(/Authorization: Bearer <token>.*--codec-auth.*http:\/\/host:port\/<token>/);

    // With it: as a bearer (the temporal CLI's --codec-auth) or in the path (the UI's endpoint).
    for (const [headers, url] of [
      [{ ...ns, ...AUTH }, `${server.url}/decode`],
      [{ ...ns, authorization: `bearer  ${TOKEN}` }, `${server.url}/decode`],
      [ns, `${server.url}/${TOKEN}/decode`],
      [ns, `${server.url}/codec/${TOKEN}/decode?x=1`],
    ] as const) {
      const served = await curl(url, sealed, headers);
      expect(served.status, url).toBe(200);
      expect(Buffer.from(JSON.parse(served.body).payloads[0].data, 'base64').toString()).toContain(
        '4111111111111111',
      );
    }
    const encoded = await curl(`${server.url}/${TOKEN}/encode`, body, ns);
    expect(encoded.status).toBe(200);
    // A token sent as the whole path (an endpoint missing /decode) is refused and not logged.
    expect((await curl(`${server.url}/${TOKEN}`, body, ns)).status).toBe(401);
    // The log says what was refused, never the token (the UI's URL carries it).
    expect(lines.join('\n')).toMatch(/POST …\/decode refused \(401 UNAUTHORIZED\)/);
    expect(lines.join('\n')).not.toContain(TOKEN.slice(1));
  });

  it('serves its namespace only: a request naming another or none is refused', async () => {
    const none = await curl(`${server.url}/decode`, '{"payloads": []}', AUTH);
    expect([none.status, JSON.parse(none.body).error.code]).toEqual([403, 'NAMESPACE_NOT_SERVED']);
    expect(JSON.parse(none.body).error.message).toMatch(
      /serves namespace payments only and the request names none/,
    );
    const other = await post(`${server.url}/decode`, { payloads: [] }, { 'X-Namespace': 'hr' });
    expect([other.status, other.body.error.code]).toEqual([403, 'NAMESPACE_NOT_SERVED']);
    expect((await post(`${server.url}/decode`, { payloads: [] })).status).toBe(200);
    // Without --namespace any namespace is served.
    expect(
      (await post(`${chained.url}/decode`, { payloads: [] }, { 'X-Namespace': 'hr' })).status,
    ).toBe(200);
  });

  it('caps concurrent requests and the bytes in flight: 503 past them, served again after', async () => {
    const held: Array<() => void> = [];
    const holding: PayloadCodec = {
      encode: async (p) => p,
      decode: (p) => new Promise((resolve) => held.push(() => resolve(p))),
    };
    const capped = await startCodecServer({
      host: '127.0.0.1',
      port: 0,
      corsOrigins: [],
      token: TOKEN,
      codecs: [holding],
      maxConcurrent: 2,
      maxInFlightBytes: 1024 * 1024,
      log: () => {},
    });
    try {
      // About kb KiB of body: base64 makes 768 bytes 1 KiB.
      const big = (kb: number) => JSON.stringify({ payloads: [json('x'.repeat(kb * 768))] });
      const small = JSON.stringify({ payloads: [json(1)] });
      const waitHeld = async (n: number) => {
        while (held.length < n) await new Promise((r) => setTimeout(r, 10));
      };
      // Two requests held by the codec: the third of any size is refused.
      const first = curl(`${capped.url}/decode`, big(400), AUTH);
      const second = curl(`${capped.url}/decode`, small, AUTH);
      await waitHeld(2);
      const third = await curl(`${capped.url}/decode`, small, AUTH);
      expect(third.status).toBe(503);
      expect(JSON.parse(third.body).error).toEqual({
        code: 'BUSY',
        message: expect.stringMatching(
          /already serving 2 requests \(--max-concurrent\): try again/,
        ),
      });
      for (const release of held.splice(0)) release();
      expect((await first).status).toBe(200);
      expect((await second).status).toBe(200);

      // 700 KiB held: another 400 KiB would pass the 1 MiB in flight.
      const heavy = curl(`${capped.url}/decode`, big(700), AUTH);
      await waitHeld(1);
      const more = await curl(`${capped.url}/decode`, big(400), AUTH);
      expect(more.status).toBe(503);
      expect(JSON.parse(more.body).error.message).toMatch(
        /would pass its cap of 1048576 \(--max-inflight-mb\)/,
      );
      // A small one still fits.
      const fits = curl(`${capped.url}/decode`, small, AUTH);
      await waitHeld(2);
      for (const release of held.splice(0)) release();
      expect((await heavy).status).toBe(200);
      expect((await fits).status).toBe(200);
      // One body larger than the whole cap can never be served: 413, not "try again".
      const huge = await curl(`${capped.url}/decode`, big(1100), AUTH);
      expect([huge.status, JSON.parse(huge.body).error.code]).toEqual([413, 'TOO_LARGE']);
      // Everything was released: the full cap is available again.
      const again = curl(`${capped.url}/decode`, big(900), AUTH);
      await waitHeld(1);
      for (const release of held.splice(0)) release();
      expect((await again).status).toBe(200);
    } finally {
      for (const release of held.splice(0)) release();
      await capped.close();
    }
  });

  it('without a token it starts only when told to, and only on loopback', async () => {
    const base = { port: 0, corsOrigins: [], codecs: [encryptionCodec], log: () => {} };
    await expect(startCodecServer({ ...base, host: '127.0.0.1' })).rejects.toThrow(/needs a token/);
    await expect(
      startCodecServer({ ...base, host: '0.0.0.0', insecureNoAuth: true }),
    ).rejects.toThrow(/only for a loopback address, not 0\.0\.0\.0/);
    await expect(startCodecServer({ ...base, host: '127.0.0.1', token: 'short' })).rejects.toThrow(
      /at least 16 characters/,
    );
    const open = await startCodecServer({ ...base, host: '127.0.0.1', insecureNoAuth: true });
    try {
      expect((await curl(`${open.url}/decode`, '{"payloads": []}')).status).toBe(200);
    } finally {
      await open.close();
    }
  });

  it('parsePayloads reads protobuf JSON: URL-safe and unpadded base64 too', () => {
    const [payload] = parsePayloads(
      JSON.stringify({ payloads: [{ metadata: { e: 'YQ' }, data: '-_8' }] }),
    );
    expect(Buffer.from(payload!.metadata!.e!).toString()).toBe('a');
    expect([...payload!.data!]).toEqual([0xfb, 0xff]);
  });
});

describe('sideeffect codec-server on the command line', () => {
  let dir: string;
  beforeAll(async () => {
    dir = await mkdtemp(path.join(tmpdir(), 'sideeffect-codec-cli-'));
  });
  afterAll(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  async function run(argv: string[], codecToken: string | null = TOKEN) {
    const out: string[] = [];
    const err: string[] = [];
    const code = await main(
      argv,
      { out: (l) => out.push(l), err: (l) => err.push(l) },
      {
        database: {},
        schema: 'sideeffect',
        cwd: REPO_ROOT,
        temporal: () => {
          throw new Error('not used');
        },
        ...(codecToken === null ? {} : { codecToken }),
      },
    );
    return { code, out: out.join('\n'), err: err.join('\n') };
  }

  it('refuses to start without a data converter, or one without codecs (exit 2)', async () => {
    const none = await run(['codec-server', '--port', '0', '--json']);
    expect(none.code).toBe(2);
    expect(JSON.parse(none.out).error.code).toBe('USAGE');
    expect(none.err).toMatch(/needs --data-converter PATH/);

    const plain = path.join(dir, 'plain.mjs');
    await writeFile(plain, 'export const dataConverter = {};\n');
    const empty = await run(['codec-server', '--data-converter', plain, '--port', '0']);
    expect(empty.code).toBe(2);
    expect(empty.err).toMatch(/has no payloadCodecs/);

    const missing = await run(['codec-server', '--data-converter', path.join(dir, 'nope.mjs')]);
    expect(missing.code).toBe(2);
    expect(missing.err).toMatch(/cannot load the data converter module/);
  });

  it('refuses to start without a token, or with a weak one (exit 2)', async () => {
    const converter = fileURLToPath(new URL('../support/encryption-codec.ts', import.meta.url));
    const args = ['codec-server', '--data-converter', converter, '--port', '0'];
    const none = await run([...args, '-o', 'json'], null);
    expect(none.code).toBe(2);
    expect(JSON.parse(none.out).error.code).toBe('USAGE');
    expect(none.err).toMatch(
      /codec-server needs a token.*--token-file PATH.*SIDEEFFECT_CODEC_TOKEN/,
    );
    const weak = path.join(dir, 'weak.token');
    await writeFile(weak, 'secret\n');
    const short = await run([...args, '--token-file', weak], null);
    expect(short.code).toBe(2);
    expect(short.err).toMatch(
      /--token-file .*weak\.token is refused, the codec token must be at least 16/,
    );
    const missing = await run([...args, '--token-file', path.join(dir, 'none.token')], null);
    expect(missing.code).toBe(2);
    expect(missing.err).toMatch(/cannot read --token-file/);
    const both = await run([...args, '--insecure-no-auth']);
    expect(both.code).toBe(2);
    expect(both.err).toMatch(/SIDEEFFECT_CODEC_TOKEN is set/);
    const open = await run([...args, '--insecure-no-auth', '--host', '0.0.0.0'], null);
    expect(open.code).toBe(2);
    expect(open.err).toMatch(/--insecure-no-auth only goes with a loopback --host/);
  });

  it('as a person runs it: a token file; curl without it refused, with it served', async () => {
    const converter = fileURLToPath(new URL('../support/encryption-codec.ts', import.meta.url));
    const tokenFile = path.join(dir, 'codec.token');
    await writeFile(tokenFile, `${TOKEN}\n`);
    const child: ChildProcess = spawn(
      process.execPath,
      [
        path.join(REPO_ROOT, 'bin/sideeffect.js'),
        '-n',
        'payments',
        'codec-server',
        '--data-converter',
        converter,
        '--token-file',
        tokenFile,
        '--port',
        '0',
        '-o',
        'jsonl',
      ],
      {
        cwd: REPO_ROOT,
        stdio: ['ignore', 'pipe', 'pipe'],
        env: { ...process.env, SIDEEFFECT_CODEC_TOKEN: '' },
      },
    );
    let stderr = '';
    child.stderr!.on('data', (chunk: Buffer) => {
      stderr += chunk.toString();
    });
    try {
      const started = await new Promise<{ url: string; auth: string; namespace: string }>(
        (resolve, reject) => {
          createInterface({ input: child.stdout! }).once('line', (line) =>
            resolve(JSON.parse(line)),
          );
          child.once('exit', (code) => reject(new Error(`codec-server exited ${code}: ${stderr}`)));
        },
      );
      expect(started).toMatchObject({ auth: 'token', namespace: 'payments' });
      const body = JSON.stringify({ payloads: [json('hello')] });
      const ns = { 'X-Namespace': 'payments' };
      expect((await curl(`${started.url}/encode`, body, ns)).status).toBe(401);
      expect(
        (
          await curl(`${started.url}/encode`, body, {
            ...ns,
            Authorization: 'Bearer nope-nope-nope-nope',
          })
        ).status,
      ).toBe(401);
      expect((await curl(`${started.url}/encode`, body, AUTH)).status).toBe(403);
      const sealed = await curl(`${started.url}/encode`, body, { ...ns, ...AUTH });
      expect(sealed.status).toBe(200);
      const opened = await curl(`${started.url}/${TOKEN}/decode`, sealed.body, ns);
      expect(JSON.parse(opened.body)).toEqual({ payloads: [json('hello')] });
      expect(stderr).toMatch(/refused \(401 UNAUTHORIZED\)/);
      expect(stderr).not.toContain(TOKEN);
    } finally {
      child.kill('SIGTERM');
    }
  });

  it('exits 3 when the port is taken', async () => {
    const port = Number(new URL(server.url).port);
    const converter = fileURLToPath(new URL('../support/encryption-codec.ts', import.meta.url));
    const busy = await run(['codec-server', '--data-converter', converter, '--port', String(port)]);
    expect(busy.code).toBe(3);
    expect(busy.err).toMatch(/cannot listen on 127\.0\.0\.1:\d+: .*EADDRINUSE/);
  });
});
