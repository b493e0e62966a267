export { SyncxError } from './errors.js';
export { type SettleAllOptions, settleAll } from './fan-in.js';
export { type AcquireOptions, Gate } from './gate.js';
export { KeyedGate } from './keyed-gate.js';
export { onPanic, PanicError } from './panic.js';
