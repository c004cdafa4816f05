import { checkTotp, totp, TOTP_LIMITS } from "../../lib/totp";

// RFC 6238 Appendix B, SHA1 key: ASCII "12345678901234567890".
const SECRET = Buffer.from("12345678901234567890", "ascii").toString("hex");
const RFC_VECTORS: Array<[number, string]> = [
	[59, "94287082"],
	[1111111109, "07081804"],
	[1111111111, "14050471"],
	[1234567890, "89005924"],
	[2000000000, "69279037"],
	[20000000000, "65353130"],
];

describe("totp", () => {
	it.each(RFC_VECTORS)("matches RFC 6238 at T=%i (last 6 digits of %s)", (t, eight) => {
		expect(totp(SECRET, t * 1000)).toBe(eight.slice(-6));
		expect(checkTotp(SECRET, eight.slice(-6), { now: t * 1000, window: 0 })).toBe(true);
	});

	it("accepts an upper-case hex secret", () => {
		expect(totp(SECRET.toUpperCase(), 59_000)).toBe("287082");
	});

	it("honours a custom period", () => {
		// With period 60, T=59 is counter 0, i.e. the 30 s vector at T=0..29.
		expect(totp(SECRET, 59_000, 60)).toBe(totp(SECRET, 0, 30));
	});

	it("throws on a malformed secret or period", () => {
		expect(() => totp("abc", 0)).toThrow(RangeError);
		expect(() => totp(SECRET, 0, 0)).toThrow(RangeError);
	});

	it("exposes its limits", () => {
		expect(TOTP_LIMITS).toEqual({ maxPeriod: 3600, maxWindow: 5 });
	});
});

describe("checkTotp", () => {
	const now = 1_700_000_015_000; // mid-period
	const at = (periods: number, period = 30) => totp(SECRET, now + periods * period * 1000, period);

	it("accepts ±1 period of drift with window 1 and rejects ±2", () => {
		expect(checkTotp(SECRET, at(0), { now })).toBe(true);
		expect(checkTotp(SECRET, at(-1), { now })).toBe(true);
		expect(checkTotp(SECRET, at(1), { now })).toBe(true);
		expect(checkTotp(SECRET, at(-2), { now })).toBe(false);
		expect(checkTotp(SECRET, at(2), { now })).toBe(false);
	});

	it("window 0 accepts only the current code, window 2 reaches ±2", () => {
		expect(checkTotp(SECRET, at(0), { now, window: 0 })).toBe(true);
		expect(checkTotp(SECRET, at(1), { now, window: 0 })).toBe(false);
		expect(checkTotp(SECRET, at(2), { now, window: 2 })).toBe(true);
		expect(checkTotp(SECRET, at(-2), { now, window: 2 })).toBe(true);
	});

	it("uses the given period", () => {
		expect(checkTotp(SECRET, at(1, 60), { now, period: 60 })).toBe(true);
		expect(checkTotp(SECRET, at(2, 60), { now, period: 60 })).toBe(false);
	});

	it("defaults to the current time", () => {
		expect(checkTotp(SECRET, totp(SECRET, Date.now()), {})).toBe(true);
	});

	it("rejects codes that are not exactly 6 digits", () => {
		const code = at(0);
		for (const bad of ["", code.slice(1), `${code}0`, ` ${code}`, "12345a", "１２３４５６", undefined]) {
			expect(checkTotp(SECRET, bad as string, { now })).toBe(false);
		}
	});

	it("rejects invalid hex secrets", () => {
		const code = at(0);
		for (const bad of ["", "abc", "zz", `${SECRET}g0`, undefined]) {
			expect(checkTotp(bad as string, code, { now })).toBe(false);
		}
	});

	it("rejects out-of-range options instead of throwing", () => {
		const code = at(0);
		expect(checkTotp(SECRET, code, { now, period: 0 })).toBe(false);
		expect(checkTotp(SECRET, code, { now, period: 3601 })).toBe(false);
		expect(checkTotp(SECRET, code, { now, period: 1.5 })).toBe(false);
		expect(checkTotp(SECRET, code, { now, window: 11 })).toBe(false);
		expect(checkTotp(SECRET, code, { now, window: -1 })).toBe(false);
		expect(checkTotp(SECRET, code, { now: NaN })).toBe(false);
	});

	it("does not go below counter 0", () => {
		expect(checkTotp(SECRET, totp(SECRET, 0), { now: 0 })).toBe(true);
	});
});
