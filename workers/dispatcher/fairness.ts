/**
 * What one dispatcher lets each config have when it claims deliveries: at most `perConfig` of a config's deliveries in
 * flight at once, and a circuit breaker per config. After `openAfter` failed attempts in a row, the config's breaker
 * opens: none of its deliveries is claimed for a cooldown (the retry delay the last failure got, doubled on every
 * failed probe, at most `maxCooldownMs`); then one delivery goes as a probe (half open). A 2xx answer closes the
 * breaker; a failed probe opens it again. Configs are keyed as the claim names their queues: the config id, '' for a
 * delivery without one. Memory: only configs with deliveries in flight or failures in a row are kept.
 */

interface Breaker {
	/** Failed attempts in a row. */
	failures: number;
	/** Open until then (ms since the epoch); 0 while closed. */
	openUntil: number;
	cooldownMs: number;
}

/** What a failed attempt did to its config's breaker. */
export type BreakerChange = "opened" | "reopened" | undefined;

export class ConfigShares {
	private readonly inflight = new Map<string, number>();
	private readonly breakers = new Map<string, Breaker>();

	constructor(
		readonly perConfig: number,
		readonly openAfter: number,
		/** The longest cooldown (ms); the caller bounds it by the retry schedule's longest delay too. */
		private readonly maxCooldownMs: () => number,
	) {}

	started(key: string): void {
		this.inflight.set(key, (this.inflight.get(key) ?? 0) + 1);
	}

	/** A delivery of the config is over; its config's deliveries still in flight. */
	finished(key: string): number {
		const n = Math.max(0, (this.inflight.get(key) ?? 0) - 1);
		if (n > 0) this.inflight.set(key, n);
		else this.inflight.delete(key);
		return n;
	}

	/**
	 * The claim's shares of the configs that may not have `perConfig` more rows: those with deliveries in flight (the
	 * rest of their bound), an open breaker (0) and a half-open one (1 in flight at most).
	 */
	shares(now = Date.now()): Map<string, number> {
		const out = new Map<string, number>();
		for (const [key, n] of this.inflight) out.set(key, Math.max(0, this.perConfig - n));
		for (const [key, b] of this.breakers) {
			if (b.openUntil === 0) continue;
			out.set(key, now < b.openUntil ? 0 : Math.max(0, 1 - (this.inflight.get(key) ?? 0)));
		}
		return out;
	}

	/** Whether the config's breaker is open or half open. */
	isOpen(key: string): boolean {
		return (this.breakers.get(key)?.openUntil ?? 0) !== 0;
	}

	/**
	 * A failed attempt; `delayMs` is the delay its delivery got before its next attempt. A failure while the breaker is
	 * open (a request sent before it opened) changes nothing; one while it is half open (the probe) opens it again.
	 */
	failed(key: string, delayMs: number, now = Date.now()): BreakerChange {
		let b = this.breakers.get(key);
		if (!b) this.breakers.set(key, (b = { failures: 0, openUntil: 0, cooldownMs: 0 }));
		b.failures++;
		const cap = this.maxCooldownMs();
		if (b.openUntil === 0) {
			if (b.failures < this.openAfter) return undefined;
			b.cooldownMs = Math.min(Math.max(0, delayMs), cap);
			b.openUntil = now + b.cooldownMs;
			return "opened";
		}
		if (now < b.openUntil) return undefined;
		b.cooldownMs = Math.min(Math.max(delayMs, 2 * b.cooldownMs), cap);
		b.openUntil = now + b.cooldownMs;
		return "reopened";
	}

	/** A 2xx answer: the breaker closes. True when it was open or half open. */
	succeeded(key: string): boolean {
		const b = this.breakers.get(key);
		this.breakers.delete(key);
		return !!b && b.openUntil !== 0;
	}

	/**
	 * A delivery of the config ended without an attempt (the config is disabled, deleted or replaced): nothing is sent
	 * there any more, the config's other deliveries are claimed at once (to end the same way). True when the breaker
	 * was open or half open.
	 */
	forget(key: string): boolean {
		return this.succeeded(key);
	}
}
