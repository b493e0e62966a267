/**
 * A TCP proxy in front of Postgres that the harness can cut: every open connection is destroyed,
 * and for the length of the cut new ones are either refused (closed at once) or black-holed
 * (accepted and never answered, like a partition), then service resumes; or every connection,
 * open or new, goes silent without being closed (`freeze`). It can also terminate
 * one connection the way a dying backend does at the worst moment: a ReadyForQuery and a FATAL
 * in the same socket chunk.
 */
import net from 'node:net';

/**
 * `refuse`: open connections dropped, new ones closed at once. `blackhole`: open ones dropped,
 * new ones accepted and never answered. `freeze`: nothing is closed, nothing more is forwarded on
 * open connections and new ones are never answered (a partition that resets nothing).
 */
export type CutMode = 'refuse' | 'blackhole' | 'freeze';

export class CuttableProxy {
  readonly #server: net.Server;
  readonly #sockets = new Set<net.Socket>();
  /** Each forwarded connection's two sockets, for a freeze to stop. */
  readonly #pairs = new Set<[client: net.Socket, upstream: net.Socket]>();
  #cut: CutMode | undefined;
  #port = 0;
  #fatalArmed: number | undefined;

  constructor(
    readonly targetHost: string,
    /** undefined: every new connection is refused (an endpoint between two servers). */
    public targetPort: number | undefined,
  ) {
    this.#server = net.createServer((client) => this.#accept(client));
  }

  /**
   * New connections go to `port` from now on (none: refused) and every open one is dropped: an
   * endpoint that follows the primary after a failover (a DNS name, a virtual IP, a managed
   * endpoint).
   */
  retarget(port: number | undefined): void {
    this.targetPort = port;
    this.#dropAll();
  }

  get port(): number {
    return this.#port;
  }

  async listen(): Promise<number> {
    await new Promise<void>((resolve, reject) => {
      this.#server.once('error', reject);
      this.#server.listen(0, '127.0.0.1', () => resolve());
    });
    this.#port = (this.#server.address() as net.AddressInfo).port;
    return this.#port;
  }

  /** Drops every connection and keeps Postgres unreachable for `ms`. */
  async cut(ms: number, mode: CutMode): Promise<void> {
    this.#cut = mode;
    if (mode === 'freeze') {
      for (const [client, upstream] of this.#pairs) {
        client.unpipe(upstream);
        upstream.unpipe(client);
        client.pause();
        upstream.pause();
      }
    } else this.#dropAll();
    await new Promise((resolve) => setTimeout(resolve, ms));
    this.#cut = undefined;
    // Black-holed connections hang until their client gives up; end them with the partition.
    this.#dropAll();
  }

  /**
   * The next connection opened through the proxy gets, right behind its `readyForQuery`-th
   * ReadyForQuery (1 = the end of its startup), a FATAL ErrorResponse (57P01, as from
   * pg_terminate_backend) written in the same chunk, and is then closed. pg parses both in one
   * `data` event, so a client whose `error` listener is not attached by then crashes the process.
   */
  fatalAfterReady(readyForQuery = 1): void {
    this.#fatalArmed = readyForQuery;
  }

  async close(): Promise<void> {
    this.#dropAll();
    await new Promise<void>((resolve) => this.#server.close(() => resolve()));
  }

  #dropAll(): void {
    for (const socket of this.#sockets) socket.destroy();
    this.#sockets.clear();
  }

  #accept(client: net.Socket): void {
    client.on('error', () => {});
    if (this.#cut === 'refuse' || this.targetPort === undefined) {
      client.destroy();
      return;
    }
    this.#sockets.add(client);
    client.once('close', () => this.#sockets.delete(client));
    if (this.#cut === 'blackhole' || this.#cut === 'freeze') {
      client.resume(); // read and discard: the peer sees a connection that never answers
      return;
    }
    const upstream = net.connect({ host: this.targetHost, port: this.targetPort });
    upstream.on('error', () => client.destroy());
    this.#sockets.add(upstream);
    upstream.once('close', () => {
      this.#sockets.delete(upstream);
      client.destroy();
    });
    const pair: [net.Socket, net.Socket] = [client, upstream];
    this.#pairs.add(pair);
    client.once('close', () => {
      this.#pairs.delete(pair);
      upstream.destroy();
    });
    client.pipe(upstream);
    const fatalAt = this.#fatalArmed;
    this.#fatalArmed = undefined;
    if (fatalAt === undefined) upstream.pipe(client);
    else this.#killAfterReady(upstream, client, fatalAt);
  }

  /** Forwards whole server messages until the `count`-th ReadyForQuery, sent together with a FATAL. */
  #killAfterReady(upstream: net.Socket, client: net.Socket, count: number): void {
    let pending = Buffer.alloc(0);
    let seen = 0;
    upstream.on('data', (chunk: Buffer) => {
      pending = Buffer.concat([pending, chunk]);
      let offset = 0;
      while (pending.length - offset >= 5) {
        const length = pending.readInt32BE(offset + 1);
        if (pending.length - offset < 1 + length) break;
        const type = String.fromCharCode(pending[offset]!);
        offset += 1 + length;
        if (type === 'Z' && ++seen === count) {
          // The client's close ends the upstream (above); nothing more is forwarded meanwhile.
          upstream.removeAllListeners('data');
          upstream.pause();
          client.end(Buffer.concat([pending.subarray(0, offset), FATAL]));
          return;
        }
      }
      client.write(pending.subarray(0, offset));
      pending = pending.subarray(offset);
    });
  }
}

/** An ErrorResponse as a backend sends it when terminated by pg_terminate_backend. */
const FATAL = (() => {
  const fields = Buffer.from(
    'SFATAL\0VFATAL\0C57P01\0Mterminating connection due to administrator command\0\0',
    'latin1',
  );
  const header = Buffer.alloc(5);
  header.write('E', 0, 'latin1');
  header.writeInt32BE(4 + fields.length, 1);
  return Buffer.concat([header, fields]);
})();

/** A port nothing listens on right now (bound and released). */
export async function freePort(): Promise<number> {
  const server = net.createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', () => resolve()));
  const { port } = server.address() as net.AddressInfo;
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}
