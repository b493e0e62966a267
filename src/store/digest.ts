import { createHash } from 'node:crypto';

/** The payload's sha-256: a key is bound to it so a reused key with other parameters is caught. */
export function payloadDigest(payload: Uint8Array): Buffer {
  return createHash('sha256').update(payload).digest();
}
