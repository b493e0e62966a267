import { createHash, hash } from 'node:crypto';

const EMPTY_DIGEST = hash('sha256', new Uint8Array(0), 'buffer');

/** The payload's sha-256: a key is bound to it so a reused key with other parameters is caught. */
export function payloadDigest(payload: Uint8Array): Buffer {
  // The one-shot form: no Hash object per call on the hot path of every acquire. Most actions
  // carry no payload: their digest is computed once.
  return payload.length === 0 ? EMPTY_DIGEST : hash('sha256', payload, 'buffer');
}

/**
 * A transactional key's binding: the payload's digest salted with the mode, so the same key
 * used once inside a store transaction and once outside it never matches its own binding and is
 * caught as a conflict instead of being judged by two sets of rules.
 */
export function transactionalDigest(payload: Uint8Array): Buffer {
  return createHash('sha256').update('sideeffect/transactional\0').update(payload).digest();
}
