/**
 * `edgelimit/lock`: a distributed lock with fencing tokens (Lock) and a limit on requests in flight
 * (Concurrency), on the same Redis as the Limiter.
 */

export {
  Concurrency,
  type ConcurrencyDecision,
  type ConcurrencyOptions,
} from "./concurrency.js";
export {
  type AcquireOptions,
  type ExtendResult,
  Lock,
  LockLostError,
  type LockOptions,
  type LockResult,
  LockUnavailableError,
  type ReleaseResult,
  type WithLockOptions,
} from "./lock.js";
