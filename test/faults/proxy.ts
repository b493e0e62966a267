/**
 * A TCP proxy in front of Postgres that the harness can cut: every open connection is destroyed,
 * and for the length of the cut new ones are either refused (closed at once) or black-holed
 * (accepted and never answered, like a partition), then service resumes.
 */
import net from 'node:net';

export type CutMode = 'refuse' | 'blackhole';

export class CuttableProxy {
  readonly #server: net.Server;
  readonly #sockets = new Set<net.Socket>();
  #cut: CutMode | undefined;
  #port = 0;

  constructor(
    readonly targetHost: string,
    readonly targetPort: number,
  ) {
    this.#server = net.createServer((client) => this.#accept(client));
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
    this.#dropAll();
    await new Promise((resolve) => setTimeout(resolve, ms));
    this.#cut = undefined;
    // Black-holed connections hang until their client gives up; end them with the partition.
    this.#dropAll();
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
    if (this.#cut === 'refuse') {
      client.destroy();
      return;
    }
    this.#sockets.add(client);
    client.once('close', () => this.#sockets.delete(client));
    if (this.#cut === 'blackhole') {
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
    client.once('close', () => upstream.destroy());
    client.pipe(upstream);
    upstream.pipe(client);
  }
}

/** A port nothing listens on right now (bound and released). */
export async function freePort(): Promise<number> {
  const server = net.createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', () => resolve()));
  const { port } = server.address() as net.AddressInfo;
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}
