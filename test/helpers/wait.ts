/** Polling helpers for tests that wait on asynchronous effects (streams, workers, brokers). */

export const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

/** Waits until a synchronous check holds; throws naming `what` after `ms`. */
export async function waitFor(check: () => boolean, what: string, ms = 15_000, every = 25): Promise<void> {
	const end = Date.now() + ms;
	while (!check()) {
		if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
		await sleep(every);
	}
}

/** Waits until an async probe returns a truthy value and returns it; throws naming `what` after `ms`. */
export async function waitForValue<T>(what: string, fn: () => Promise<T | undefined | null | false>, ms = 10_000): Promise<T> {
	const end = Date.now() + ms;
	for (;;) {
		const v = await fn();
		if (v) return v;
		if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
		await sleep(50);
	}
}

/** Polls until `ok` holds and returns the last value either way (the caller asserts on it). */
export async function eventually<T>(fn: () => Promise<T>, ok: (v: T) => boolean, timeoutMs = 15_000): Promise<T> {
	const until = Date.now() + timeoutMs;
	for (;;) {
		const v = await fn();
		if (ok(v) || Date.now() > until) return v;
		await sleep(100);
	}
}
