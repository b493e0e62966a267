export { SyncxError, type SyncxErrorCode } from './errors.js';
export {
  fanInErr,
  fanInLimit,
  fanInLimitCtx,
  type SettleAllOptions,
  settleAll,
} from './fan-in.js';
export { type AcquireOptions, Gate, type Release } from './gate.js';
export { KeyedGate } from './keyed-gate.js';
export { onPanic, PanicError, type PanicHandler, setPanicHandler } from './panic.js';
