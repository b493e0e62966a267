import { readFileSync } from 'node:fs';
import path from 'node:path';
import { type CodecServer, isLoopback, startCodecServer, tokenProblem } from '../codec-server.js';
import { type Context, defineCommand, type OptionCheck } from '../command.js';
import { loadDataConverter } from '../data-converter.js';
import { nonEmpty, positiveInteger } from '../option-checks.js';
import { EXIT } from '../usage.js';

/** The port Temporal's own codec server samples use. */
const DEFAULT_PORT = 8888;
/** The dev server's UI (`temporal server start-dev`), under both names a browser may use. */
const DEFAULT_CORS_ORIGINS = ['http://localhost:8233', 'http://127.0.0.1:8233'];

/** What `sideeffect codec-server` serves, and to whom. */
interface Serve {
  /** Module whose data converter's `payloadCodecs` the server applies. */
  dataConverter?: string;
  host: string;
  port: number;
  /** Browser origins allowed by CORS: the Temporal UI's. */
  corsOrigins: string[];
  /** File holding the token every request must carry (`--token-file`); else `SIDEEFFECT_CODEC_TOKEN`. */
  tokenFile?: string;
  /** Serve without a token: only on a loopback `host`. */
  insecureNoAuth: boolean;
  maxConcurrent?: number;
  maxInFlightBytes?: number;
}

/**
 * `sideeffect codec-server`: the app's payload codecs over Temporal's codec server protocol, so
 * the Temporal UI shows encrypted payloads decoded and encodes what a person sends (a verdict
 * through the `resolve` signal). Runs until SIGINT or SIGTERM.
 */
export const codecServer = defineCommand({
  name: 'codec-server',
  summary:
    'your payload codecs as a codec server, so the Temporal UI shows encrypted payloads and encodes the verdicts you send from it',
  usage: [
    'sideeffect codec-server --data-converter PATH --token-file PATH [--port N] [--host H] [--cors-origin URL]... [-n NS] [--max-concurrent N] [--max-inflight-mb N] [-o json]',
  ],
  about: `Serves the payload codecs of your data converter over Temporal's codec server protocol
(POST /encode and /decode, {"payloads": [...]}), so the Temporal web UI shows what an encryption
codec wrote (a ReconcileWorkflow's key and reason) and encodes a verdict you send from it as
your workers would. Runs until Ctrl-C (SIGINT) or SIGTERM. With -n NS it serves only requests
whose X-Namespace is NS (one naming none is refused).`,
  options: {
    'data-converter': {
      type: 'string',
      arg: 'PATH',
      description:
        'a module exporting `dataConverter` (or a default export) with payloadCodecs (default: SIDEEFFECT_DATA_CONVERTER)',
      parse: nonEmpty('--data-converter needs a module path'),
    },
    'token-file': {
      type: 'string',
      arg: 'PATH',
      description:
        'the token every request must carry, since the server decrypts for whoever calls it (default: SIDEEFFECT_CODEC_TOKEN). 16+ characters of A-Za-z0-9._~-; make one with `openssl rand -hex 32 > codec.token`. A request carries it as Authorization: Bearer <token> (temporal --codec-auth "Bearer <token>") or in the path: the Temporal UI\'s codec endpoint is http://host:port/<token>. Else 401',
      parse: nonEmpty('--token-file needs a file name'),
    },
    'insecure-no-auth': {
      type: 'boolean',
      description:
        'serve without a token, only with a loopback --host (every process on this machine can then decrypt)',
    },
    port: {
      type: 'string',
      arg: 'N',
      description: `default ${DEFAULT_PORT}; 0 picks a free port (the printed URL says which)`,
      parse: (value, { fail }) => {
        const port = Number(value);
        return /^\d+$/.test(value) && Number.isSafeInteger(port) && port <= 65_535
          ? port
          : fail('--port must be a port number (0 picks a free one)');
      },
    },
    host: {
      type: 'string',
      arg: 'H',
      description:
        'the address to listen on, default 127.0.0.1. Past this machine, put TLS in front (the token travels in every request)',
      parse: (value, { fail }) => (value.trim() ? value : fail('--host needs an address')),
    },
    'cors-origin': {
      type: 'string',
      multiple: true,
      arg: 'URL',
      description: `the browser origin of the UI that may call it (repeatable); default ${DEFAULT_CORS_ORIGINS.join(' and ')}, the dev server's UI. Other origins are refused (403); requests without Origin need the token like any other`,
      parse: corsOrigin,
    },
    'max-concurrent': {
      type: 'string',
      arg: 'N',
      description: 'requests served at once, default 16; past it 503 (try again)',
      parse: positiveInteger,
    },
    'max-inflight-mb': {
      type: 'string',
      arg: 'N',
      description:
        'megabytes of request bodies held at once, default 32; past it 503, and a body larger than that (or 16) is refused with 413',
      parse: positiveInteger,
    },
  },
  notes: `Point the UI at http://host:port/<token>: \`temporal server start-dev --ui-codec-endpoint URL\`,
a UI server's TEMPORAL_CODEC_ENDPOINT, or the UI's Codec Server setting (this browser only);
the temporal CLI takes --codec-endpoint URL --codec-auth "Bearer <token>". Refusals get a status
and {"error": {"code", "message"}}: 401 UNAUTHORIZED, 403 ORIGIN_NOT_ALLOWED or
NAMESPACE_NOT_SERVED, 413 TOO_LARGE, 503 BUSY, 400 INVALID_JSON, INVALID_REQUEST,
INVALID_PAYLOAD or CODEC_FAILED.`,
  database: false,
  parse(args): Serve {
    const { values } = args;
    const host = values.host ?? '127.0.0.1';
    const tokenFile = values['token-file'];
    const insecureNoAuth = values['insecure-no-auth'] === true;
    if (insecureNoAuth && tokenFile !== undefined)
      args.fail('give --token-file or --insecure-no-auth, not both');
    if (insecureNoAuth && !isLoopback(host))
      args.fail(
        `--insecure-no-auth only goes with a loopback --host (127.0.0.1, ::1, localhost), not ${host}: anyone who reaches ${host} could decrypt your payloads; give --token-file`,
      );
    const maxConcurrent = values['max-concurrent'];
    const maxMb = values['max-inflight-mb'];
    return {
      ...(values['data-converter'] === undefined
        ? {}
        : { dataConverter: values['data-converter'] }),
      host,
      port: values.port ?? DEFAULT_PORT,
      corsOrigins: values['cors-origin'] ?? DEFAULT_CORS_ORIGINS,
      ...(tokenFile === undefined ? {} : { tokenFile }),
      insecureNoAuth,
      ...(maxConcurrent === undefined ? {} : { maxConcurrent }),
      ...(maxMb === undefined ? {} : { maxInFlightBytes: maxMb * 1024 * 1024 }),
    };
  },
  run: serve,
});

/**
 * A browser origin, `scheme://host[:port]`, as the browser sends it in `Origin`. Never `*`: the
 * server decrypts, and any page the person opens could then read what it decodes.
 */
function corsOrigin(value: string, { fail }: OptionCheck): string {
  try {
    const url = new URL(value.trim());
    const bare = url.pathname === '/' && !url.search && !url.hash && !url.username;
    if (bare && (url.protocol === 'http:' || url.protocol === 'https:')) return url.origin;
  } catch {
    // Not a URL: refused below.
  }
  return fail(
    `--cors-origin must be the UI's origin, like http://localhost:8233 (scheme, host, port; no path, no *): ${value}`,
  );
}

/** Where the token comes from: `--token-file`, else `SIDEEFFECT_CODEC_TOKEN`; a problem is a message. */
function readToken(
  tokenFile: string | undefined,
  env: Context['env'],
): { token?: string; from: string } | { problem: string } {
  if (tokenFile === undefined)
    return env.codecToken === undefined
      ? { from: '' }
      : { token: env.codecToken.trim(), from: 'SIDEEFFECT_CODEC_TOKEN' };
  try {
    return {
      token: readFileSync(path.resolve(env.cwd, tokenFile), 'utf8').trim(),
      from: `--token-file ${tokenFile}`,
    };
  } catch (error) {
    return { problem: `cannot read --token-file ${tokenFile}: ${(error as Error).message}` };
  }
}

async function serve(params: Serve, ctx: Context): Promise<number> {
  const usage = (message: string) => ctx.fail('USAGE', message, EXIT.usage);
  const read = readToken(params.tokenFile, ctx.env);
  if ('problem' in read) return usage(read.problem);
  const { token, from } = read;
  if (token !== undefined && params.insecureNoAuth)
    return usage(
      '--insecure-no-auth, yet SIDEEFFECT_CODEC_TOKEN is set: unset it or drop --insecure-no-auth',
    );
  if (token === undefined && !params.insecureNoAuth)
    return usage(
      'codec-server needs a token, since it decrypts for whoever calls it: --token-file PATH (make one with `openssl rand -hex 32 > codec.token`) or SIDEEFFECT_CODEC_TOKEN; only on 127.0.0.1, --insecure-no-auth serves every local process without one',
    );
  const problem = token === undefined ? undefined : tokenProblem(token);
  // No colon after the source: a file named *.token followed by one reads as a secret to mask.
  if (problem) return usage(`${from} is refused, ${problem}`);
  const modulePath = params.dataConverter ?? ctx.env.dataConverterPath;
  if (!modulePath)
    return usage(
      'codec-server needs --data-converter PATH (or SIDEEFFECT_DATA_CONVERTER): the module of your dataConverter',
    );
  const codecs = (await loadDataConverter(modulePath, ctx.env.cwd)).payloadCodecs ?? [];
  if (codecs.length === 0)
    return usage(
      `${modulePath}: its data converter has no payloadCodecs, so a codec server has nothing to encode or decode`,
    );
  const { namespace } = ctx.options;
  let server: CodecServer;
  try {
    server = await startCodecServer({
      codecs,
      host: params.host,
      port: params.port,
      corsOrigins: params.corsOrigins,
      ...(token === undefined ? { insecureNoAuth: true } : { token }),
      ...(namespace ? { namespace } : {}),
      ...(params.maxConcurrent ? { maxConcurrent: params.maxConcurrent } : {}),
      ...(params.maxInFlightBytes ? { maxInFlightBytes: params.maxInFlightBytes } : {}),
      log: ctx.err,
    });
  } catch (error) {
    return ctx.fail(
      'UNAVAILABLE',
      `cannot listen on ${params.host}:${params.port}: ${(error as Error).message}`,
      EXIT.unavailable,
    );
  }
  const { url } = server;
  // The token itself is never printed: the lines say where to take it from.
  const secret =
    token === undefined
      ? undefined
      : params.tokenFile !== undefined
        ? `$(cat ${params.tokenFile})`
        : '$SIDEEFFECT_CODEC_TOKEN';
  const uiEndpoint = secret === undefined ? url : `${url}/${secret}`;
  ctx.print(
    [
      `codec server on ${url}: ${codecs.length} payload codec(s) from ${modulePath}`,
      `  POST ${url}/encode and ${url}/decode; browser origins allowed: ${params.corsOrigins.join(', ')}${namespace ? `; namespace ${namespace} only` : ''}`,
      token === undefined
        ? `  WARNING: --insecure-no-auth: every process on this machine can decrypt through it`
        : `  every request needs the token (${from}): Authorization: Bearer <token>, or the URL ${url}/<token>`,
      'Point the Temporal UI at it, one of:',
      `  temporal server start-dev --ui-codec-endpoint "${uiEndpoint}"`,
      `  a UI server: TEMPORAL_CODEC_ENDPOINT="${uiEndpoint}" (or codec.endpoint in its config)`,
      `  this browser only: the UI's Codec Server icon (top bar) -> browser endpoint ${url}${secret === undefined ? '' : '/<token>'},`,
      '    "Use my browser setting and ignore Cluster-level setting"',
      `The temporal CLI: temporal workflow show --codec-endpoint ${url}${secret === undefined ? '' : ` --codec-auth "Bearer ${secret}"`} -w <workflow id>`,
      'Stop with Ctrl-C.',
    ].join('\n'),
    {
      url,
      codecs: codecs.length,
      corsOrigins: params.corsOrigins,
      auth: token === undefined ? 'none' : 'token',
      ...(namespace ? { namespace } : {}),
    },
  );
  await new Promise<void>((resolve) => {
    const stop = () => {
      process.off('SIGINT', stop);
      process.off('SIGTERM', stop);
      resolve();
    };
    process.on('SIGINT', stop);
    process.on('SIGTERM', stop);
  });
  await server.close();
  return EXIT.ok;
}
