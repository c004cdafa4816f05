/**
 * The dispatcher's per-config shares and circuit breaker (workers/dispatcher/fairness.ts): what a claim may take of
 * each config, when a failing config is held back, for how long, and what closes its breaker.
 */
import { ConfigShares } from "../../workers/dispatcher/fairness";

const shares = (cap = 60_000) => new ConfigShares(4, 3, () => cap);

test("a config's share is the rest of its bound; configs with nothing in flight are left to the default", () => {
	const s = shares();
	expect(s.shares(0)).toEqual(new Map());
	s.started("a");
	s.started("a");
	s.started("b");
	expect(s.shares(0)).toEqual(
		new Map([
			["a", 2],
			["b", 3],
		]),
	);
	for (let i = 0; i < 3; i++) s.started("a");
	expect(s.shares(0).get("a")).toBe(0);
	s.finished("b");
	expect(s.shares(0).has("b")).toBe(false);
});

test("the breaker opens after the set number of failures in a row, for the delay the last one got; then one probe", () => {
	const s = shares();
	expect(s.failed("a", 5000, 1000)).toBeUndefined();
	expect(s.failed("a", 5000, 1000)).toBeUndefined();
	expect(s.isOpen("a")).toBe(false);
	expect(s.failed("a", 5000, 1000)).toBe("opened");
	expect(s.isOpen("a")).toBe(true);
	// Held back until 6000 (another config is not: it is not even named).
	expect(s.shares(5999)).toEqual(new Map([["a", 0]]));
	// A request sent before the breaker opened fails meanwhile: nothing changes.
	expect(s.failed("a", 5000, 3000)).toBeUndefined();
	expect(s.shares(5999)).toEqual(new Map([["a", 0]]));
	// Half open: one delivery at a time, none while one is in flight.
	expect(s.shares(6000)).toEqual(new Map([["a", 1]]));
	s.started("a");
	expect(s.shares(6000)).toEqual(new Map([["a", 0]]));
	s.finished("a");
	// The probe fails: open again, twice as long (or the probe's own delay when longer).
	expect(s.failed("a", 5000, 6000)).toBe("reopened");
	expect(s.shares(15_999).get("a")).toBe(0);
	expect(s.shares(16_000).get("a")).toBe(1);
	expect(s.failed("a", 30_000, 16_000)).toBe("reopened");
	expect(s.shares(16_000 + 29_999).get("a")).toBe(0);
	expect(s.shares(16_000 + 30_000).get("a")).toBe(1);
	// A 2xx closes it: the config gets its whole bound again.
	expect(s.succeeded("a")).toBe(true);
	expect(s.isOpen("a")).toBe(false);
	expect(s.shares(50_000)).toEqual(new Map());
	expect(s.succeeded("a")).toBe(false);
});

test("a success resets the count of failures in a row", () => {
	const s = shares();
	s.failed("a", 5000, 0);
	s.failed("a", 5000, 0);
	expect(s.succeeded("a")).toBe(false);
	expect(s.failed("a", 5000, 0)).toBeUndefined();
	expect(s.failed("a", 5000, 0)).toBeUndefined();
	expect(s.failed("a", 5000, 0)).toBe("opened");
});

test("the cooldown stays under its bound; forget closes the breaker of a config that gets nothing any more", () => {
	const s = shares(20_000);
	for (let i = 0; i < 3; i++) s.failed("a", 36_000_000, 0);
	expect(s.shares(19_999).get("a")).toBe(0);
	expect(s.shares(20_000).get("a")).toBe(1);
	s.failed("a", 5000, 20_000);
	expect(s.shares(39_999).get("a")).toBe(0);
	expect(s.forget("a")).toBe(true);
	expect(s.shares(20_001)).toEqual(new Map());
	expect(s.forget("a")).toBe(false);
});
