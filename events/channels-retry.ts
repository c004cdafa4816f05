/** How the production stream's groups wait after a failed event: the outage held in place, the failure that spends a delivery. */
import { isDependencyOutage, isTransportError } from "../lib/errors";
import { isCacheUnavailable } from "../runtime/kv";

/** Backoff before a failed NATS delivery is released for the next one: 0.25 s doubling to 30 s. */
export function retryDelay(delivery: number): number {
	return Math.min(30_000, 250 * 2 ** Math.max(0, delivery - 1));
}

/**
 * A failure of a dependency that is away or hangs (PostgreSQL, the cache, another node), not of the event: the
 * handler tries again in place, without spending a delivery, so an outage of any length never moves an event to
 * `.failed`. Anything else counts against STREAM_MAX_RETRIES.
 */
export function isOutage(err: unknown): boolean {
	const code = (err as { code?: unknown })?.code;
	return isDependencyOutage(err) || isCacheUnavailable(err) || isTransportError(err) || code === 503 || code === 504;
}

/** Pause before the next in-place try of an event held by an outage: 0.25 s doubling to 5 s. */
export const outageDelay = (attempt: number) => Math.min(5000, 250 * 2 ** Math.min(attempt, 5));
