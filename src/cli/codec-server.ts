import { createHash, timingSafeEqual } from 'node:crypto';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import { type AddressInfo, isIP } from 'node:net';
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
  /**
   * The credential every request must carry, as `Authorization: Bearer <token>` or as the last
   * path segment before `/encode`/`/decode` (the UI's codec endpoint `http://host:port/<token>`):
   * the server decrypts, so without it any process that reaches the port reads every payload.
   * Absent only with {@link insecureNoAuth} on a loopback address.
   */
  token?: string;
  /** Serve without a token: refused unless `host` is loopback (127.0.0.0/8, ::1, localhost). */
  insecureNoAuth?: boolean;
  /** Serve only requests whose `X-Namespace` is this namespace (a request naming none is refused); any when absent. */
  namespace?: string;
  /** Requests decoded at once; past it 503. Default {@link DEFAULT_MAX_CONCURRENT}. */
  maxConcurrent?: number;
  /** Bytes of request bodies held at once across requests; past it 503. Default {@link DEFAULT_MAX_IN_FLIGHT_BYTES}. */
  maxInFlightBytes?: number;
  /** Where refused requests and codec failures are reported (never payload contents). */
  log: (line: string) => void;
}

export interface CodecServer {
  /** `http://host:port`, what `--ui-codec-endpoint` and `--codec-endpoint` take. */
  url: string;
  close(): Promise<void>;
}

/** A request the codec server refuses: the HTTP status and a stable `code` in the JSON body. */
class CodecRequestError extends Error {
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

/**
 * Above the 6 connections a browser opens to one host, so one person's UI is never refused;
 * the memory cap below is what bounds the process.
 */
const DEFAULT_MAX_CONCURRENT = 16;

/**
 * A request costs several times its body while decoded (JSON, base64, the codec's output, the
 * answer), and nothing else bounds how many a caller sends. Measured: 8 concurrent 14 MB decodes
 * grew the process by 148 MB uncapped, by 72 MB with this cap (2 served, 6 told 503).
 */
const DEFAULT_MAX_IN_FLIGHT_BYTES = 32 * 1024 * 1024;

/** A token that fits a URL path unescaped and is not guessable by trying. */
const TOKEN = /^[A-Za-z0-9._~-]{16,}$/;

/** Why `token` is refused, or undefined for a good one. */
export function tokenProblem(token: string): string | undefined {
  return TOKEN.test(token)
    ? undefined
    : 'the codec token must be at least 16 characters of A-Z a-z 0-9 . _ ~ - (it may go in a URL path); make one with `openssl rand -hex 32`';
}

/** Addresses only this machine reaches: the one place serving without a token is allowed. */
export function isLoopback(host: string): boolean {
  const bare = host.replace(/^\[|\]$/g, '');
  if (bare === 'localhost' || bare === '::1') return true;
  return isIP(bare) === 4 && bare.startsWith('127.');
}

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
function formatPayloads(payloads: Payload[]): {
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
async function applyCodecs(
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

const digest = (value: string) => createHash('sha256').update(value).digest();

/** What the handler shares across requests: the token's digest and the load now. */
interface State {
  options: CodecServerOptions;
  origins: Set<string>;
  token: Buffer | undefined;
  maxConcurrent: number;
  maxInFlightBytes: number;
  active: number;
  inFlightBytes: number;
}

export async function startCodecServer(options: CodecServerOptions): Promise<CodecServer> {
  if (options.token === undefined && !(options.insecureNoAuth && isLoopback(options.host)))
    throw new Error(
      options.insecureNoAuth
        ? `insecureNoAuth is only for a loopback address, not ${options.host}`
        : 'a codec server needs a token (or insecureNoAuth on a loopback address)',
    );
  const problem = options.token === undefined ? undefined : tokenProblem(options.token);
  if (problem) throw new Error(problem);
  const state: State = {
    options,
    origins: new Set(options.corsOrigins),
    token: options.token === undefined ? undefined : digest(options.token),
    maxConcurrent: options.maxConcurrent ?? DEFAULT_MAX_CONCURRENT,
    maxInFlightBytes: options.maxInFlightBytes ?? DEFAULT_MAX_IN_FLIGHT_BYTES,
    active: 0,
    inFlightBytes: 0,
  };
  const server = createServer((request, response) => {
    handle(request, response, state).catch((error: unknown) => {
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
  state: State,
): Promise<void> {
  const { options, origins } = state;
  const origin = request.headers.origin;
  const send = (status: number, body: unknown, extra: Record<string, string> = {}) => {
    const headers: Record<string, string> = { 'Content-Type': 'application/json', ...extra };
    if (origin && origins.has(origin)) Object.assign(headers, corsHeaders(origin));
    response.writeHead(status, headers).end(JSON.stringify(body));
  };
  const refuse = (error: CodecRequestError) => {
    // Never the URL as sent: its path may carry the token.
    options.log(
      `codec server: ${request.method} …/${endpoint(request.url ?? '') ?? '(another path)'} refused (${error.status} ${error.code}): ${maskConnectionString(error.message)}`,
    );
    send(
      error.status,
      { error: { code: error.code, message: error.message } },
      error.status === 401
        ? { 'WWW-Authenticate': 'Bearer' }
        : error.status === 503
          ? { 'Retry-After': '1' }
          : {},
    );
  };
  let reserved = 0;
  let counted = false;
  try {
    // A browser page from another origin gets nothing decoded: this server decrypts.
    if (origin !== undefined && !origins.has(origin))
      throw new CodecRequestError(
        403,
        'ORIGIN_NOT_ALLOWED',
        `origin ${origin} is not allowed: start the codec server with --cors-origin ${origin}`,
      );
    // A preflight carries no credentials (browsers never send them there) and gets no payloads.
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
    authorize(request, state.token);
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
    if (options.namespace !== undefined && namespace !== options.namespace)
      throw new CodecRequestError(
        403,
        'NAMESPACE_NOT_SERVED',
        namespace === undefined
          ? `this codec server serves namespace ${options.namespace} only and the request names none (X-Namespace)`
          : `this codec server serves namespace ${options.namespace}, not ${String(namespace)}`,
      );
    if (state.active >= state.maxConcurrent)
      throw new CodecRequestError(
        503,
        'BUSY',
        `the codec server is already serving ${state.maxConcurrent} requests (--max-concurrent): try again`,
      );
    state.active++;
    counted = true;
    const reserve = (bytes: number) => {
      if (state.inFlightBytes + bytes > state.maxInFlightBytes)
        throw new CodecRequestError(
          503,
          'BUSY',
          `the codec server holds ${state.inFlightBytes} bytes of requests and this one would pass its cap of ${state.maxInFlightBytes} (--max-inflight-mb): try again`,
        );
      state.inFlightBytes += bytes;
      reserved += bytes;
    };
    const payloads = parsePayloads(
      await readBody(request, Math.min(MAX_BODY_BYTES, state.maxInFlightBytes), reserve),
    );
    send(200, formatPayloads(await applyCodecs(options.codecs, direction, payloads)));
  } catch (error) {
    if (!(error instanceof CodecRequestError)) throw error;
    // The rest of a refused body is not read: close rather than keep the connection.
    if (!request.complete) response.setHeader('Connection', 'close');
    refuse(error);
  } finally {
    state.inFlightBytes -= reserved;
    if (counted) state.active--;
  }
}

/**
 * The token as `Authorization: Bearer <token>` (the temporal CLI's `--codec-auth`, scripts) or as
 * the path segment before `/encode`/`/decode` (the UI, whose codec setting is only a URL). Both
 * candidates are hashed and compared in constant time, so timing does not reveal a prefix.
 */
function authorize(request: IncomingMessage, token: Buffer | undefined): void {
  if (token === undefined) return;
  const header = request.headers.authorization;
  const bearer = header === undefined ? undefined : /^Bearer\s+(\S+)\s*$/i.exec(header)?.[1];
  const segments = (request.url ?? '').split('?')[0]!.split('/');
  const inPath = segments.length > 2 ? segments.at(-2) : undefined;
  let matched = false;
  for (const candidate of [bearer, inPath]) {
    if (candidate !== undefined && timingSafeEqual(digest(candidate), token)) matched = true;
  }
  if (matched) return;
  throw new CodecRequestError(
    401,
    'UNAUTHORIZED',
    header === undefined && !inPath
      ? 'this codec server needs its token: send Authorization: Bearer <token> (temporal --codec-auth "Bearer <token>"), or use http://host:port/<token> as the codec endpoint'
      : "the token does not match the codec server's (--token-file or SIDEEFFECT_CODEC_TOKEN)",
  );
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

/**
 * The body as text. Past `limit` the rest is drained unread and 413 answered; every chunk is
 * first `reserve`d against the server-wide cap (which throws 503 when it is reached).
 */
function readBody(
  request: IncomingMessage,
  limit: number,
  reserve: (bytes: number) => void,
): Promise<string> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    // Bytes already reserved: a declared Content-Length is reserved whole, before any is read.
    let covered = 0;
    const stop = (error: unknown) => {
      request.off('data', onData);
      request.resume();
      reject(error);
    };
    const tooLarge = () =>
      new CodecRequestError(413, 'TOO_LARGE', `the body is larger than ${limit} bytes`);
    const cover = (bytes: number) => {
      if (bytes <= covered) return;
      reserve(bytes - covered);
      covered = bytes;
    };
    const onData = (chunk: Buffer) => {
      size += chunk.length;
      if (size > limit) return stop(tooLarge());
      try {
        cover(size);
      } catch (error) {
        return stop(error);
      }
      chunks.push(chunk);
    };
    const declared = Number(request.headers['content-length']);
    if (declared > limit) return stop(tooLarge());
    try {
      if (Number.isSafeInteger(declared)) cover(declared);
    } catch (error) {
      return stop(error);
    }
    request.on('data', onData);
    request.once('end', () => resolve(Buffer.concat(chunks).toString('utf8')));
    request.once('error', reject);
  });
}
