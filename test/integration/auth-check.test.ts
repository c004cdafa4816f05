/**
 * POST /auth/check (TOTP), through HTTP (spec: Authentication endpoints, `POST /auth/check` fields; Limits: TOTP
 * period 30 s, window 1, 6 digits; docs/contracts.md "AES values"). Secrets are sent as clients send them: base64 of
 * the AES wire form of the hex secret.
 */
import { bootPlatform, type TestPlatform } from "../helpers/platform";
import { aesOf, awayFromBoundary, errorBody, LeakWatch, tokenOf } from "../helpers/auth";
import { Aes, encryptEnvelope } from "../../lib/crypto";
import { totp } from "../../lib/totp";

const HEX = "3132333435363738393031323334353637383930"; // RFC 6238's SHA-1 test secret
const OTHER_HEX = "0f1e2d3c4b5a69788796a5b4c3d2e1f00f1e2d3c";

let p: TestPlatform;
let w: LeakWatch;
let http: TestPlatform["http"];
let token: string;
let secret: string;

const check = (body: unknown, t = token) => http("POST", "/auth/check", { token: t, body });
const at = (offsetPeriods: number, period = 30) => totp(HEX, Date.now() + offsetPeriods * period * 1000, period);

beforeAll(async () => {
	p = await bootPlatform();
	w = new LeakWatch(p);
	http = w.http;
	w.secret(p.root.password, "root password", true);
	token = (await tokenOf(http, { grant_type: "password", client_id: p.root.client_id, username: p.root.username, password: p.root.password })).access_token;
	secret = encryptEnvelope(aesOf(p), HEX);
});
afterAll(() => p.cleanup());

test("the current code → OK; the response is exactly { result }", async () => {
	await awayFromBoundary(30, 5000);
	const r = await check({ secret, token: at(0) });
	expect(r.status).toBe(200);
	expect(r.body).toEqual({ result: "OK" });
	// The AES wire form itself (without the outer base64) is accepted too; upper-case hex as well.
	expect((await check({ secret: aesOf(p).encrypt(HEX), token: at(0) })).body).toEqual({ result: "OK" });
	expect((await check({ secret: encryptEnvelope(aesOf(p), HEX.toUpperCase()), token: at(0) })).body).toEqual({ result: "OK" });
});

test("a wrong code, or the code of another secret → NOK", async () => {
	await awayFromBoundary(30, 5000);
	const valid = new Set([-1, 0, 1].map((o) => at(o)));
	let wrong = at(0);
	for (let i = 1; valid.has(wrong); i++) wrong = String((Number(at(0)) + i * 7919) % 1_000_000).padStart(6, "0");
	const r = await check({ secret, token: wrong });
	expect(r.status).toBe(200);
	expect(r.body).toEqual({ result: "NOK" });
	const other = encryptEnvelope(aesOf(p), OTHER_HEX);
	const otherCode = totp(OTHER_HEX, Date.now());
	if (!valid.has(otherCode)) expect((await check({ secret, token: otherCode })).body).toEqual({ result: "NOK" });
	// Not six digits: simply not a valid code.
	for (const t of ["12345", "1234567", "abcdef", " " + at(0)]) expect((await check({ secret, token: t })).body).toEqual({ result: "NOK" });
	expect((await check({ secret: other, token: otherCode })).body).toEqual({ result: "OK" });
});

test("drift: ±1 period accepted with the default window (1) and with window 1; ±2 rejected", async () => {
	await awayFromBoundary(30, 5000);
	for (const o of [-1, 1]) {
		expect((await check({ secret, token: at(o) })).body).toEqual({ result: "OK" });
		expect((await check({ secret, token: at(o), window: 1 })).body).toEqual({ result: "OK" });
	}
	for (const o of [-2, 2]) {
		if ([-1, 0, 1].some((n) => at(n) === at(o))) continue; // a code collision (1 in 10^6) is not drift
		expect((await check({ secret, token: at(o) })).body).toEqual({ result: "NOK" });
		expect((await check({ secret, token: at(o), window: 1 })).body).toEqual({ result: "NOK" });
	}
});

test("window 0 accepts only the current period; window 2 accepts ±2", async () => {
	await awayFromBoundary(30, 5000);
	expect((await check({ secret, token: at(0), window: 0 })).body).toEqual({ result: "OK" });
	for (const o of [-1, 1]) if (at(o) !== at(0)) expect((await check({ secret, token: at(o), window: 0 })).body).toEqual({ result: "NOK" });
	for (const o of [-2, 2]) expect((await check({ secret, token: at(o), window: 2 })).body).toEqual({ result: "OK" });
});

test("a custom period", async () => {
	await awayFromBoundary(60, 5000);
	const code60 = at(0, 60);
	expect((await check({ secret, token: code60, period: 60 })).body).toEqual({ result: "OK" });
	expect((await check({ secret, token: at(1, 60), period: 60 })).body).toEqual({ result: "OK" });
	if (![-1, 0, 1].some((o) => at(o) === code60)) expect((await check({ secret, token: code60 })).body).toEqual({ result: "NOK" });
	await awayFromBoundary(20, 5000);
	expect((await check({ secret, token: at(0, 20), period: 20, window: 0 })).body).toEqual({ result: "OK" });
	if (at(-1, 20) !== at(0, 20)) expect((await check({ secret, token: at(-1, 20), period: 20, window: 0 })).body).toEqual({ result: "NOK" });
});

test("a malformed secret → 400", async () => {
	const malformed = [
		"garbage",
		Buffer.from(HEX).toString("base64"), // hex in clear, not encrypted
		HEX,
		encryptEnvelope(new Aes("another-aes-secret"), HEX), // encrypted under another key
		encryptEnvelope(aesOf(p), HEX).slice(0, -6),
	];
	for (const s of malformed) {
		const r = await check({ secret: s, token: at(0) });
		expect({ s, status: r.status }).toEqual({ s, status: 400 });
		expect(r.body).toEqual(errorBody(400));
		expect(r.body.message).toMatch(/secret/);
	}
});

test("missing or ill-typed fields → 400 naming the field", async () => {
	const cases: Array<[unknown, string]> = [
		[{ token: "123456" }, "secret"],
		[{ secret }, "token"],
		[{}, "secret"],
		[{ secret: 1, token: "123456" }, "secret"],
		[{ secret, token: 123456 }, "token"],
		[{ secret, token: "123456", period: "30" }, "period"],
		[{ secret, token: "123456", period: 0 }, "period"],
		[{ secret, token: "123456", period: 1.5 }, "period"],
		[{ secret, token: "123456", window: -1 }, "window"],
		[{ secret, token: "123456", window: "1" }, "window"],
		[{ secret, token: "123456", colour: "red" }, "colour"],
	];
	for (const [body, field] of cases) {
		const r = await check(body);
		expect({ body, status: r.status }).toEqual({ body, status: 400 });
		expect(r.body.message).toContain(field);
	}
	for (const raw of ["[1]", '"x"']) expect((await http("POST", "/auth/check", { token, raw })).status).toBe(400);
});

test("the check needs a bearer; it is not a JWT check", async () => {
	expect((await http("POST", "/auth/check", { body: { secret, token: at(0) } })).body).toEqual(errorBody(401, "authorization token is required"));
	expect((await check({ secret, token: at(0) }, "garbage")).status).toBe(401);
	// A JWT in `token` is not a code.
	expect((await check({ secret, token })).body).toEqual({ result: "NOK" });
});

test("no response of this suite contained a password or a password hash", () => {
	expect(w.leaks()).toEqual([]);
});
