// The app's data converter: an AES-256-GCM payload codec, as Temporal's encryption sample builds
// one. Its Client and Worker get it, and so does `sideeffect resolve --data-converter`. Payloads
// that are not encrypted pass through decode unchanged: the Temporal UI sends a signal as plain
// JSON, and the workflow must still read it.
import { createCipheriv, createDecipheriv, createHash, randomBytes } from 'node:crypto';

export const ENCRYPTED = 'binary/encrypted';
const KEY = createHash('sha256').update('the user app codec key').digest();
const text = new TextEncoder();
const words = new TextDecoder();

const base64 = (bytes) => Buffer.from(bytes ?? new Uint8Array()).toString('base64');

/** The payload as JSON (metadata and data base64), so the app needs no protobuf. */
function serialize(payload) {
  const metadata = Object.fromEntries(
    Object.entries(payload.metadata ?? {}).map(([name, value]) => [name, base64(value)]),
  );
  return Buffer.from(JSON.stringify({ metadata, data: base64(payload.data) }));
}

function deserialize(bytes) {
  const { metadata, data } = JSON.parse(bytes.toString());
  return {
    metadata: Object.fromEntries(
      Object.entries(metadata).map(([name, value]) => [name, Buffer.from(value, 'base64')]),
    ),
    data: Buffer.from(data, 'base64'),
  };
}

const encryptionCodec = {
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

export const dataConverter = { payloadCodecs: [encryptionCodec] };
