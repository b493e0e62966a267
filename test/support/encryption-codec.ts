/**
 * An AES-256-GCM payload codec, as Temporal's encryption sample builds one: every payload is
 * replaced by an encrypted one with encoding `binary/encrypted`. Loaded by the test worker and
 * client, and by the `sideeffect` CLI through `--data-converter`.
 */
import { createCipheriv, createDecipheriv, createHash, randomBytes } from 'node:crypto';
import type { DataConverter, Payload, PayloadCodec } from '@temporalio/common';

export const ENCRYPTED = 'binary/encrypted';
const KEY = createHash('sha256').update('sideeffect test codec key').digest();
const text = new TextEncoder();
const words = new TextDecoder();

/** The payload as JSON (metadata and data base64), so no protobuf dependency is needed. */
function serialize(payload: Payload): Buffer {
  const metadata = Object.fromEntries(
    Object.entries(payload.metadata ?? {}).map(([name, value]) => [
      name,
      Buffer.from(value ?? new Uint8Array()).toString('base64'),
    ]),
  );
  const data = Buffer.from(payload.data ?? new Uint8Array()).toString('base64');
  return Buffer.from(JSON.stringify({ metadata, data }));
}

function deserialize(bytes: Buffer): Payload {
  const { metadata, data } = JSON.parse(bytes.toString()) as {
    metadata: Record<string, string>;
    data: string;
  };
  return {
    metadata: Object.fromEntries(
      Object.entries(metadata).map(([name, value]) => [name, Buffer.from(value, 'base64')]),
    ),
    data: Buffer.from(data, 'base64'),
  };
}

export const encryptionCodec: PayloadCodec = {
  async encode(payloads) {
    return payloads.map((payload) => {
      const iv = randomBytes(12);
      const cipher = createCipheriv('aes-256-gcm', KEY, iv);
      const sealed = Buffer.concat([cipher.update(serialize(payload)), cipher.final()]);
      return {
        metadata: { encoding: text.encode(ENCRYPTED) },
        data: Buffer.concat([iv, cipher.getAuthTag(), sealed]),
      };
    });
  },
  async decode(payloads) {
    return payloads.map((payload) => {
      const encoding = payload.metadata?.encoding;
      if (!encoding || words.decode(encoding) !== ENCRYPTED) return payload;
      const bytes = Buffer.from(payload.data ?? new Uint8Array());
      const decipher = createDecipheriv('aes-256-gcm', KEY, bytes.subarray(0, 12));
      decipher.setAuthTag(bytes.subarray(12, 28));
      return deserialize(Buffer.concat([decipher.update(bytes.subarray(28)), decipher.final()]));
    });
  },
};

export const dataConverter: DataConverter = { payloadCodecs: [encryptionCodec] };
