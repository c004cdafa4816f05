/**
 * POST /auth/check guessing bounds (docs/contracts.md "Limits the platform keeps"): `window` at most 5; after 30 `NOK`
 * answers for one session within 15 minutes, 429 until the window passes, counted in the shared cache.
 */
import { bootPlatform, type TestPlatform } from "../helpers/platform";
import { withStatusProbe } from "../helpers/status-probe";
import { aesOf, errorBody, kvOf, payloadOf, tokenOf, ttlOf } from "../helpers/auth";
import { encryptEnvelope } from "../../lib/crypto";
import { totp } from "../../lib/totp";

const HEX = "3132333435363738393031323334353637383930";
const LIMITED = errorBody(429, "too many failed TOTP checks for this session");

let p: TestPlatform;
let secret: string;

const login = async () =>
	(await tokenOf(p.http, { grant_type: "password", client_id: p.root.client_id, username: p.root.username, password: p.root.password })).access_token as string;
const check = (token: string, body: unknown) => p.http("POST", "/auth/check", { token, body });

/** A code that is none of the codes of the current ±5 periods. */
function wrongCode(): string {
	const valid = new Set(Array.from({ length: 11 }, (_, i) => totp(HEX, Date.now() + (i - 5) * 30_000)));
	let n = 0;
	while (valid.has(String(n).padStart(6, "0"))) n++;
	return String(n).padStart(6, "0");
}

beforeAll(async () => {
	p = await bootPlatform();
	secret = encryptEnvelope(aesOf(p), HEX);
});
afterAll(() => p.cleanup());
withStatusProbe(() => p.url);

test("window above 5 → 400; 5 is accepted", async () => {
	const token = await login();
	for (const window of [6, 10, 1000]) expect((await check(token, { secret, token: "123456", window })).body).toEqual(errorBody(400, "window must be an integer from 0 to 5"));
	const r = await check(token, { secret, token: totp(HEX, Date.now()), window: 5 });
	expect(r.status).toBe(200);
	expect(r.body).toEqual({ result: "OK" });
});

test("a burst of guesses: 30 NOK answers for one session, then 429 even for the right code; another session is not affected", async () => {
	const token = await login();
	const bad = wrongCode();
	// Concurrent guesses: the count is taken before answering, so no more than 30 NOK leave however they interleave.
	const answers = await Promise.all(Array.from({ length: 60 }, () => check(token, { secret, token: bad, window: 5 })));
	expect(answers.filter((r) => r.status === 200 && r.body.result === "NOK")).toHaveLength(30);
	const limited = answers.filter((r) => r.status === 429);
	expect(limited).toHaveLength(30);
	for (const r of limited) expect(r.body).toEqual(LIMITED);
	expect((await check(token, { secret, token: totp(HEX, Date.now()) })).body).toEqual(LIMITED);
	// The counter lives in the shared cache, keyed by session, for 15 minutes.
	const session = payloadOf(token).session;
	expect(Number(await kvOf(p).get(`auth:totp-fail:${session}`))).toBeGreaterThanOrEqual(30);
	const ttl = await ttlOf(kvOf(p), `auth:totp-fail:${session}`);
	expect(ttl).toBeGreaterThan(14 * 60_000);
	expect(ttl).toBeLessThanOrEqual(15 * 60_000);
	const other = await login();
	expect((await check(other, { secret, token: totp(HEX, Date.now()) })).body).toEqual({ result: "OK" });
	// When the window passes (the key expires), the session may check again.
	await kvOf(p).del(`auth:totp-fail:${session}`);
	expect((await check(token, { secret, token: totp(HEX, Date.now()) })).body).toEqual({ result: "OK" });
});

test("OK answers do not count", async () => {
	const token = await login();
	for (let i = 0; i < 35; i++) expect((await check(token, { secret, token: totp(HEX, Date.now()), window: 1 })).body).toEqual({ result: "OK" });
});
