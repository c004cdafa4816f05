/**
 * Grant time windows evaluated by field matching (lib/grant-time.ts): the same answers as cron-parser's schedule
 * (its `prev()`), at a bounded cost whatever the expression and the timezone.
 */
import { CronExpressionParser } from "cron-parser";
import { compileWindows, MAX_TIME_WINDOWS, parseCron, timeWindowOpen, windowsOpen } from "../../lib/grant-time";
import { validateGrant } from "../../lib/grant-validation";

/** cron-parser's answer: the latest fire t <= now in tz, open while now < t + duration; undefined when it gives up. */
function reference(cron: string, durationS: number, now: number, tz: string): boolean | undefined {
	try {
		const e = CronExpressionParser.parse(cron, { tz, currentDate: new Date(now + 1) });
		return now < e.prev().getTime() + durationS * 1000;
	} catch {
		return undefined;
	}
}

/** mulberry32: the same pseudo-random cases on every run. */
function rng(seed: number) {
	return () => {
		seed |= 0;
		seed = (seed + 0x6d2b79f5) | 0;
		let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
		t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
		return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
	};
}

function field(r: () => number, min: number, max: number): string {
	const n = (lo = min, hi = max) => lo + Math.floor(r() * (hi - lo + 1));
	switch (Math.floor(r() * 6)) {
		case 0:
			return "*";
		case 1:
			return String(n());
		case 2: {
			const a = n();
			return `${a}-${n(a, max)}`;
		}
		case 3:
			return `*/${n(1, Math.max(1, Math.floor((max - min) / 2)))}`;
		case 4:
			return `${n()}-${max}/${n(1, max - min + 1)}`;
		default:
			return [...new Set([n(), n(), n()])].join(",");
	}
}

function randomCron(r: () => number): string {
	const dow = r() < 0.15 ? `${Math.floor(r() * 7)}${r() < 0.5 ? "L" : `#${1 + Math.floor(r() * 5)}`}` : field(r, 0, 7);
	const dom = r() < 0.1 ? "L" : field(r, 1, 31);
	const five = `${field(r, 0, 59)} ${field(r, 0, 23)} ${dom} ${field(r, 1, 12)} ${dow}`;
	return r() < 0.3 ? `${field(r, 0, 59)} ${five}` : five;
}

const offsetChanges = (tz: string, a: number, b: number) => {
	const off = (t: number) =>
		new Date(new Date(t).toLocaleString("en-US", { timeZone: tz })).getTime() - new Date(new Date(t).toLocaleString("en-US", { timeZone: "UTC" })).getTime();
	return off(a) !== off(b);
};

describe("the same answers as cron-parser's schedule", () => {
	test("1 000 random expressions, instants, durations and zones (no daylight-saving change inside the window)", () => {
		const r = rng(20261127);
		const zones = ["UTC", "Asia/Kolkata", "Asia/Tokyo", "America/New_York", "Europe/Berlin", "Australia/Lord_Howe"];
		const durations = [1, 59, 60, 3600, 86_400, 7 * 86_400, 40 * 86_400, 400 * 86_400];
		let compared = 0;
		const mismatches: string[] = [];
		for (let i = 0; i < 1000; i++) {
			const cron = randomCron(r);
			try {
				if (!parseCron(cron).fires) continue;
			} catch {
				continue; // not valid cron (a value twice, ...)
			}
			const now = Date.UTC(2020, 0, 1) + Math.floor(r() * 10 * 365 * 86_400) * 1000 + Math.floor(r() * 1000);
			const tz = zones[Math.floor(r() * zones.length)];
			const d = durations[Math.floor(r() * durations.length)];
			const want = reference(cron, d, now, tz);
			if (want === undefined || offsetChanges(tz, now, now - d * 1000 - 2 * 86_400_000)) continue;
			compared++;
			const got = timeWindowOpen([{ cron_exp: cron, duration: d }], now, tz);
			if (got !== want) mismatches.push(`${cron} d=${d} at ${new Date(now).toISOString()} ${tz}: ${got}, cron-parser ${want}`);
		}
		expect(mismatches).toEqual([]);
		expect(compared).toBeGreaterThan(400);
	});

	test("sparse expressions: 29 February (leap years only), the fifth Friday of February, the last day of a month", () => {
		const leap = [{ cron_exp: "59 23 29 2 *", duration: 60 }];
		expect(timeWindowOpen(leap, Date.parse("2024-02-29T23:59:30Z"))).toBe(true);
		expect(timeWindowOpen(leap, Date.parse("2024-03-01T00:00:00Z"))).toBe(false);
		expect(timeWindowOpen(leap, Date.parse("2025-02-28T23:59:30Z"))).toBe(false);
		expect(timeWindowOpen(leap, Date.parse("2028-02-29T23:59:59Z"), "UTC")).toBe(true);
		// 23:59 in Tehran (UTC+3:30) is 20:29 UTC.
		expect(timeWindowOpen(leap, Date.parse("2024-02-29T20:29:10Z"), "Asia/Tehran")).toBe(true);
		// Four years long: open from 29 February 2024 until the next one.
		expect(timeWindowOpen([{ cron_exp: "59 23 29 2 *", duration: 4 * 366 * 86_400 }], Date.parse("2027-06-01T00:00:00Z"))).toBe(true);
		// 2036-02-29 is the next Friday 29 February after 2008.
		const fifthFriday = [{ cron_exp: "0 12 * 2 5#5", duration: 3600 }];
		expect(timeWindowOpen(fifthFriday, Date.parse("2036-02-29T12:30:00Z"))).toBe(true);
		expect(timeWindowOpen(fifthFriday, Date.parse("2036-02-22T12:30:00Z"))).toBe(false);
		const last = [{ cron_exp: "0 0 L * *", duration: 86_400 }];
		expect(timeWindowOpen(last, Date.parse("2024-02-29T10:00:00Z"))).toBe(true);
		expect(timeWindowOpen(last, Date.parse("2024-02-28T10:00:00Z"))).toBe(false);
	});

	test("an expression that never fires is refused when a grant is written, and never opens when stored", () => {
		const grant = (cron_exp: string) => ({ subject: "@x@root.local", action: "read", object: "content:notes", time: [{ cron_exp, duration: 60 }] });
		// cron-parser refuses these days itself; the field tables would too (`fires`).
		expect(() => validateGrant(grant("0 0 30 2 *"), ["root.local"])).toThrow(/^time\[0\]\.cron_exp: (invalid cron expression|cron expression never fires)/);
		expect(() => validateGrant(grant("0 0 31 4,6,9,11 *"), ["root.local"])).toThrow(/^time\[0\]\.cron_exp: /);
		expect(timeWindowOpen([{ cron_exp: "0 0 30 2 *", duration: 10 ** 12 }], Date.now())).toBe(false);
		expect(() => validateGrant(grant("59 23 29 2 *"), ["root.local"])).not.toThrow();
	});
});

describe("bounded cost", () => {
	const cpuMs = () => {
		const u = process.cpuUsage();
		return (u.user + u.system) / 1000;
	};
	const sparse = (n: number) => Array.from({ length: n }, (_, i) => ({ cron_exp: `${i % 60}-59/59 ${i % 24} 29 2 *`, duration: 1 + i }));

	test(`a grant holds at most ${MAX_TIME_WINDOWS} windows: more answer 400 naming the limit; a stored one with more never opens`, () => {
		const body = (n: number) => ({ subject: "@x@root.local", action: "read", object: "content:notes", time: sparse(n) });
		expect(() => validateGrant(body(MAX_TIME_WINDOWS + 1), ["root.local"])).toThrow(`time: at most ${MAX_TIME_WINDOWS} windows per grant (got ${MAX_TIME_WINDOWS + 1})`);
		expect(() => validateGrant(body(MAX_TIME_WINDOWS), ["root.local"])).not.toThrow();
		const always = { cron_exp: "* * * * *", duration: 120 };
		expect(timeWindowOpen([always], Date.now())).toBe(true);
		expect(timeWindowOpen([...sparse(MAX_TIME_WINDOWS), always], Date.now())).toBe(false);
	});

	test("16 sparse windows in 100 timezones never seen before: well under a millisecond of CPU each (cron-parser: ~40 ms a window)", () => {
		const compiled = compileWindows(sparse(MAX_TIME_WINDOWS));
		const zones = Intl.supportedValuesOf("timeZone").slice(0, 100);
		const now = Date.parse("2026-11-27T10:00:00Z");
		const t0 = cpuMs();
		for (const tz of zones) expect(windowsOpen(compiled, now, tz)).toBe(false);
		const perDecision = (cpuMs() - t0) / zones.length;
		console.log(`16 sparse windows, a new timezone each time: ${perDecision.toFixed(3)} ms of CPU per decision`);
		expect(perDecision).toBeLessThan(5);
	});

	test("the longest walk (an expression that fires once in 28 years, a window as long): bounded", () => {
		const t0 = cpuMs();
		for (let i = 0; i < 100; i++) timeWindowOpen([{ cron_exp: "0 12 * 2 5#5", duration: 30 * 366 * 86_400 }], Date.parse("2064-02-01T00:00:00Z") + i * 1000, "Europe/Berlin");
		const per = (cpuMs() - t0) / 100;
		console.log(`28-year walk: ${per.toFixed(3)} ms of CPU per window`);
		expect(per).toBeLessThan(5);
	});
});
