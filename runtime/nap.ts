/**
 * A pause a poll loop takes between rounds that another part of the worker can cut short: `nap(ms, set)` resolves
 * after `ms`, or at once when the function it hands to `set` is called (then `set(undefined)` once it is over).
 */
export function nap(ms: number, set: (wake: (() => void) | undefined) => void): Promise<void> {
	return new Promise<void>((resolve) => {
		const done = () => {
			clearTimeout(t);
			set(undefined);
			resolve();
		};
		const t = setTimeout(done, ms);
		set(done);
	});
}
