/**
 * Failure counters of the guessing bounds (failed logins: services/auth/login-limits.ts; failed TOTP checks per
 * session, user and IP), in the shared cache (runtime/kv: Redis or in-process), so every node counts the same
 * failures. A counter's window is fixed: it opens at the first failure and ends one window later, whatever comes after
 * (failures spread out never add up); the failure that reaches the limit blocks for one window from itself (429 with
 * Retry-After until then).
 */
import { ApiError } from "../../lib/errors";
import type { KeyValue } from "../../runtime/kv";

export interface FailureLimit {
	key: string;
	limit: number;
	/** The message of the 429. */
	message: string;
}

const UNTIL = ":until";
/** When a counter that reached its limit expires (a counter's TTL cannot be read through runtime/kv). */
const untilKey = (key: string) => `${key}${UNTIL}`;
/** When the counter's window opened (its first failure). */
const openedKey = (key: string) => `${key}:opened`;

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

	/** The counters under `prefix` that reached their limit and still block: their count and when the block ends. */
	async blocked(prefix: string): Promise<Array<{ key: string; count: number; until: number }>> {
		const out: Array<{ key: string; count: number; until: number }> = [];
		for (const u of await this.kv.keys(prefix, UNTIL)) {
			const key = u.slice(0, -UNTIL.length);
			const [count, until] = await Promise.all([this.kv.get(key), this.kv.get(u)]);
			if (count !== null && until !== null && Number(until) > Date.now()) out.push({ key, count: Number(count), until: Number(until) });
		}
		return out;
	}

	/** Lifts the block of counter `key`, forgetting its failures (the next attempt is a first one); false when none. */
	async lift(key: string): Promise<boolean> {
		if (Number((await this.kv.get(untilKey(key))) ?? 0) <= Date.now()) return false;
		await Promise.all([this.kv.del(key), this.kv.del(untilKey(key)), this.kv.del(openedKey(key))]);
		return true;
	}

	/**
	 * Counts one failure, atomically, on each of `limits` in order; a count past its limit answers 429 at once and is
	 * not carried to the next counters (a guess refused there taught the caller nothing). Returns the counts.
	 */
	async count(limits: FailureLimit[]): Promise<number[]> {
		const counts: number[] = [];
		for (const l of limits) {
			const now = Date.now();
			// The first failure opens the window; later ones count in it without moving its end.
			const opened = (await this.kv.setIfAbsent(openedKey(l.key), String(now), this.windowMs)) ? now : Number((await this.kv.get(openedKey(l.key))) ?? now);
			const n = await this.kv.incr(l.key, Math.max(1, Math.min(this.windowMs, opened + this.windowMs - now)));
			counts.push(n);
			if (n >= l.limit) {
				// The limit reached: blocked for a whole window from this failure, the counter kept as long.
				await this.kv.set(l.key, String(n), this.windowMs);
				await this.kv.set(untilKey(l.key), String(now + this.windowMs), this.windowMs);
			}
			if (n > l.limit) throw tooMany(l.message, this.windowMs / 1000);
		}
		return counts;
	}
}
