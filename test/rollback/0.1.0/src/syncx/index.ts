export { SyncxError, type SyncxErrorCode } from './errors.js';
export { fanInErr, fanInLimit, fanInLimitCtx } from './fan-in.js';
export { type AcquireOptions, Gate, type Release } from './gate.js';
export { KeyedGate } from './keyed-gate.js';
export { PanicError, type PanicHandler, setPanicHandler } from './panic.js';
