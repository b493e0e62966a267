/**
 * `sideeffect codec-server` on a real socket, with the AES-GCM codec the Temporal tests use:
 * Temporal's protocol (encode and decode round trip, codecs chained as the SDK chains them, CORS
 * for the UI's origin) and every malformed request refused with a status and a JSON error code
 * while the server keeps serving. The UI itself drives it in test/e2e/ui-codec.test.ts.
 */
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
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

const UI = 'http://localhost:8233';
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
    headers: { 'Content-Type': 'application/json', 'X-Namespace': 'payments', ...headers },
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
    const get = await fetch(`${server.url}/decode`);
    expect([get.status, ((await get.json()) as Answer).error.code]).toEqual([
      405,
      'METHOD_NOT_ALLOWED',
    ]);
    const elsewhere = await post(`${server.url}/transcode`, { payloads: [] });
    expect([elsewhere.status, elsewhere.body.error.code]).toEqual([404, 'NOT_FOUND']);
    const namespace = await post(`${server.url}/decode`, { payloads: [] }, { 'X-Namespace': 'hr' });
    expect([namespace.status, namespace.body.error.code]).toEqual([403, 'NAMESPACE_NOT_SERVED']);
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

  async function run(argv: string[]) {
    const out: string[] = [];
    const err: string[] = [];
    const code = await main(
      argv,
      { out: (l) => out.push(l), err: (l) => err.push(l) },
      {
        database: {},
        schema: 'sideeffect',
        temporal: () => {
          throw new Error('not used');
        },
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

  it('exits 3 when the port is taken', async () => {
    const port = Number(new URL(server.url).port);
    const converter = fileURLToPath(new URL('../support/encryption-codec.ts', import.meta.url));
    const busy = await run(['codec-server', '--data-converter', converter, '--port', String(port)]);
    expect(busy.code).toBe(3);
    expect(busy.err).toMatch(/cannot listen on 127\.0\.0\.1:\d+: .*EADDRINUSE/);
  });
});
