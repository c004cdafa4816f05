/**
 * Failure counters of the guessing bounds (failed logins per IP, failed TOTP checks per session, user and IP), in the
 * shared cache (lib/kv: Redis or in-process), so every node counts the same failures. A counter lives for its window
 * after the last failure counted; once it reaches its limit the caller gets 429 with Retry-After until it expires.
 */
import { ApiError } from "../../lib/errors";
import type { KeyValue } from "../../lib/kv";

export interface FailureLimit {
	key: string;
	limit: number;
	/** The message of the 429. */
	message: string;
}

/** When a counter that reached its limit expires (a counter's TTL cannot be read through lib/kv). */
const untilKey = (key: string) => `${key}:until`;

export function tooMany(message: string, retryAfterS: number): ApiError {
	const err = new ApiError(429, message);
	err.data = { retryAfter: Math.max(1, Math.ceil(retryAfterS)) };
	return err;
}

export class FailureCounter {
	constructor(
		private readonly kv: KeyValue,
		private readonly windowMs: number,
	) {}

	/** 429 when one of `limits` (the first in order) has reached its limit. */
	async assertBelow(limits: FailureLimit[]): Promise<void> {
		const counts = await Promise.all(limits.map((l) => this.kv.get(l.key)));
		const hit = limits.find((l, i) => Number(counts[i] ?? 0) >= l.limit);
		if (!hit) return;
		const until = Number((await this.kv.get(untilKey(hit.key))) ?? 0);
		throw tooMany(hit.message, (until > Date.now() ? until - Date.now() : this.windowMs) / 1000);
	}

	/**
	 * Counts one failure, atomically, on each of `limits` in order; a count past its limit answers 429 at once and is
	 * not carried to the next counters (a guess refused there taught the caller nothing). Returns the counts.
	 */
	async count(limits: FailureLimit[]): Promise<number[]> {
		const counts: number[] = [];
		for (const l of limits) {
			const n = await this.kv.incr(l.key, this.windowMs);
			counts.push(n);
			if (n >= l.limit) await this.kv.set(untilKey(l.key), String(Date.now() + this.windowMs), this.windowMs);
			if (n > l.limit) throw tooMany(l.message, this.windowMs / 1000);
		}
		return counts;
	}
}
