import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Payload, PayloadCodec } from '@temporalio/common';
import { maskConnectionString } from '../core/mask.js';

/**
 * Temporal's codec server protocol: `POST …/encode` and `POST …/decode` with
 * `{"payloads": [{"metadata": {name: base64}, "data": base64}]}` (protobuf JSON), answered in the
 * same shape; `X-Namespace` names the namespace. The Temporal UI calls it from the browser (so
 * CORS, preflight included) to show what an encryption codec wrote and to encode what a person
 * sends; `temporal --codec-endpoint` calls it too.
 */
export interface CodecServerOptions {
  /** The app's `dataConverter.payloadCodecs`, applied in the SDK's order. */
  codecs: PayloadCodec[];
  host: string;
  /** 0 picks a free port (the URL says which). */
  port: number;
  /** Browser origins that may call it (the UI's, e.g. `http://localhost:8233`). */
  corsOrigins: string[];
  /** Serve only requests for this namespace (by `X-Namespace`); any when absent. */
  namespace?: string;
  /** Where refused requests and codec failures are reported (never payload contents). */
  log: (line: string) => void;
}

export interface CodecServer {
  /** `http://host:port`, what `--ui-codec-endpoint` and `--codec-endpoint` take. */
  url: string;
  close(): Promise<void>;
}

/** A request the codec server refuses: the HTTP status and a stable `code` in the JSON body. */
export class CodecRequestError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
  ) {
    super(message);
    this.name = 'CodecRequestError';
  }
}

/** Larger than any request the UI sends (Temporal refuses payloads above 2 MiB by default). */
export const MAX_BODY_BYTES = 16 * 1024 * 1024;

/** Protobuf JSON accepts the standard and the URL-safe alphabet, padded or not. */
const BASE64 = /^[A-Za-z0-9+/_-]*={0,2}$/;

/** Reads `{"payloads": [...]}`; every field is checked before a codec sees it. */
export function parsePayloads(body: string): Payload[] {
  let parsed: unknown;
  try {
    parsed = JSON.parse(body);
  } catch (error) {
    throw new CodecRequestError(
      400,
      'INVALID_JSON',
      `the body is not JSON: ${(error as Error).message}`,
    );
  }
  if (!isObject(parsed) || !Array.isArray(parsed.payloads))
    throw new CodecRequestError(
      400,
      'INVALID_REQUEST',
      'the body must be {"payloads": [...]}, as Temporal sends to a codec server',
    );
  return parsed.payloads.map((payload, i) => parsePayload(payload, i));
}

function parsePayload(value: unknown, index: number): Payload {
  const bad = (why: string) =>
    new CodecRequestError(400, 'INVALID_PAYLOAD', `payloads[${index}]: ${why}`);
  if (!isObject(value)) throw bad('must be an object {"metadata": {...}, "data": "<base64>"}');
  const { metadata, data } = value;
  if (metadata !== undefined && metadata !== null && !isObject(metadata))
    throw bad('metadata must be an object of base64 strings');
  const fields: Record<string, Uint8Array> = {};
  for (const [name, encoded] of Object.entries(metadata ?? {})) {
    fields[name] = bytes(encoded, () => bad(`metadata.${name} must be a base64 string`));
  }
  return {
    metadata: fields,
    data:
      data === undefined || data === null
        ? new Uint8Array()
        : bytes(data, () => bad('data must be a base64 string')),
  };
}

function bytes(value: unknown, bad: () => Error): Uint8Array {
  if (typeof value !== 'string' || !BASE64.test(value) || value.replace(/=+$/, '').length % 4 === 1)
    throw bad();
  return new Uint8Array(Buffer.from(value, 'base64'));
}

/** Payloads as protobuf JSON: standard base64, padded. */
export function formatPayloads(payloads: Payload[]): {
  payloads: { metadata: Record<string, string>; data: string }[];
} {
  return {
    payloads: payloads.map(({ metadata, data }) => ({
      metadata: Object.fromEntries(
        Object.entries(metadata ?? {}).map(([name, value]) => [name, base64(value)]),
      ),
      data: base64(data),
    })),
  };
}

function base64(value: Uint8Array | null | undefined): string {
  return Buffer.from(value ?? new Uint8Array()).toString('base64');
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/** Encode runs the codecs in order, decode in reverse, as the SDK's Client and Worker do. */
export async function applyCodecs(
  codecs: PayloadCodec[],
  direction: 'encode' | 'decode',
  payloads: Payload[],
): Promise<Payload[]> {
  const chain = direction === 'encode' ? codecs : [...codecs].reverse();
  let current = payloads;
  for (const codec of chain) {
    try {
      current = await codec[direction](current);
    } catch (error) {
      throw new CodecRequestError(
        400,
        'CODEC_FAILED',
        `the codec could not ${direction} the payloads: ${(error as Error).message}`,
      );
    }
    if (!Array.isArray(current) || current.length !== payloads.length)
      throw new CodecRequestError(
        500,
        'CODEC_FAILED',
        `the codec's ${direction} returned ${Array.isArray(current) ? current.length : 'no'} payload(s) for ${payloads.length}`,
      );
  }
  return current;
}

/** Headers the UI sends: JSON, the namespace, and the access token when so configured. */
const ALLOWED_HEADERS = 'Content-Type, X-Namespace, Authorization, Authorization-Extras';

export async function startCodecServer(options: CodecServerOptions): Promise<CodecServer> {
  const origins = new Set(options.corsOrigins);
  const server = createServer((request, response) => {
    handle(request, response, options, origins).catch((error: unknown) => {
      // Only a broken socket gets here; the client is gone.
      options.log(`codec server: ${maskConnectionString(String(error))}`);
      response.destroy();
    });
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(options.port, options.host, () => {
      server.off('error', reject);
      resolve();
    });
  });
  const { port } = server.address() as AddressInfo;
  const host = options.host.includes(':') ? `[${options.host}]` : options.host;
  return {
    url: `http://${host}:${port}`,
    close: () =>
      new Promise((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}

async function handle(
  request: IncomingMessage,
  response: ServerResponse,
  options: CodecServerOptions,
  origins: Set<string>,
): Promise<void> {
  const origin = request.headers.origin;
  const send = (status: number, body: unknown) => {
    const headers: Record<string, string> = { 'Content-Type': 'application/json' };
    if (origin && origins.has(origin)) Object.assign(headers, corsHeaders(origin));
    response.writeHead(status, headers).end(JSON.stringify(body));
  };
  const refuse = (error: CodecRequestError) => {
    options.log(
      `codec server: ${request.method} ${request.url} refused (${error.status} ${error.code}): ${maskConnectionString(error.message)}`,
    );
    send(error.status, { error: { code: error.code, message: error.message } });
  };
  try {
    // A browser page from another origin gets nothing decoded: this server decrypts.
    if (origin !== undefined && !origins.has(origin))
      throw new CodecRequestError(
        403,
        'ORIGIN_NOT_ALLOWED',
        `origin ${origin} is not allowed: start the codec server with --cors-origin ${origin}`,
      );
    if (request.method === 'OPTIONS') {
      const headers: Record<string, string> = {
        ...(origin ? corsHeaders(origin) : {}),
        'Access-Control-Allow-Methods': 'POST, OPTIONS',
        'Access-Control-Allow-Headers': ALLOWED_HEADERS,
        'Access-Control-Max-Age': '600',
      };
      // Chrome asks before a public page (Temporal Cloud's UI) calls a server on this machine.
      if (request.headers['access-control-request-private-network'] === 'true')
        headers['Access-Control-Allow-Private-Network'] = 'true';
      response.writeHead(204, headers).end();
      return;
    }
    const direction = endpoint(request.url ?? '');
    if (!direction)
      throw new CodecRequestError(
        404,
        'NOT_FOUND',
        'a codec server answers POST …/encode and POST …/decode',
      );
    if (request.method !== 'POST')
      throw new CodecRequestError(405, 'METHOD_NOT_ALLOWED', `${direction} takes POST`);
    const namespace = request.headers['x-namespace'];
    if (
      options.namespace !== undefined &&
      namespace !== undefined &&
      namespace !== options.namespace
    )
      throw new CodecRequestError(
        403,
        'NAMESPACE_NOT_SERVED',
        `this codec server serves namespace ${options.namespace}, not ${String(namespace)}`,
      );
    const payloads = parsePayloads(await readBody(request));
    send(200, formatPayloads(await applyCodecs(options.codecs, direction, payloads)));
  } catch (error) {
    if (!(error instanceof CodecRequestError)) throw error;
    // The rest of a refused body is not read: close rather than keep the connection.
    if (!request.complete) response.setHeader('Connection', 'close');
    refuse(error);
  }
}

/** `/encode`, `/decode`, or the same under a prefix (a proxy's `/codec/decode`), query ignored. */
function endpoint(url: string): 'encode' | 'decode' | undefined {
  const last = url.split('?')[0]!.split('/').at(-1);
  return last === 'encode' || last === 'decode' ? last : undefined;
}

function corsHeaders(origin: string): Record<string, string> {
  return {
    'Access-Control-Allow-Origin': origin,
    // For the UI's "Include cross-origin credentials" setting.
    'Access-Control-Allow-Credentials': 'true',
    Vary: 'Origin',
  };
}

/** The body as text; past {@link MAX_BODY_BYTES} the rest is drained unread and 413 answered. */
function readBody(request: IncomingMessage): Promise<string> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    const tooLarge = () =>
      new CodecRequestError(413, 'TOO_LARGE', `the body is larger than ${MAX_BODY_BYTES} bytes`);
    if (Number(request.headers['content-length']) > MAX_BODY_BYTES) {
      request.resume();
      reject(tooLarge());
      return;
    }
    const onData = (chunk: Buffer) => {
      size += chunk.length;
      if (size <= MAX_BODY_BYTES) {
        chunks.push(chunk);
        return;
      }
      request.off('data', onData);
      request.resume();
      reject(tooLarge());
    };
    request.on('data', onData);
    request.once('end', () => resolve(Buffer.concat(chunks).toString('utf8')));
    request.once('error', reject);
  });
}
