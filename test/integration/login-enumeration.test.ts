/**
 * Login enumeration by timing (issue 9 item 6): an unknown username must cost what a known one with a wrong
 * password costs (a real bcrypt comparison either way), so `/auth/token` timings do not tell which logins exist.
 * Each attempt comes from its own X-Forwarded-For address (TRUST_PROXY), so the failed-login limit never applies.
 */
import { bootPlatform, type TestPlatform } from "../helpers/platform";
import { withStatusProbe } from "../helpers/status-probe";
import { errorBody } from "../helpers/auth";

let p: TestPlatform;
let ip = 0;

beforeAll(async () => {
	p = await bootPlatform({ trustProxy: true });
});
afterAll(async () => {
	await p?.cleanup();
});
withStatusProbe(() => p.url);

async function timed(username: string): Promise<number> {
	const t0 = process.hrtime.bigint();
	const r = await p.http("POST", "/auth/token", {
		headers: { "x-forwarded-for": `203.0.113.${++ip}` },
		body: { grant_type: "password", client_id: p.root.client_id, username, password: "not-the-password" },
	});
	const ms = Number(process.hrtime.bigint() - t0) / 1e6;
	expect(r.body).toEqual(errorBody(401, "username or password is invalid"));
	return ms;
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

test("an unknown username and a known one with a wrong password take the same time (median ratio within 0.5..2)", async () => {
	// Warm up both paths once.
	await timed("nobody-at-all");
	await timed(p.root.username);
	const unknown: number[] = [];
	const known: number[] = [];
	for (let i = 0; i < 5; i++) {
		unknown.push(await timed(`nobody-${i}-${Date.now().toString(36)}`));
		known.push(await timed(p.root.username));
	}
	const ratio = median(unknown) / median(known);
	expect({ unknown: median(unknown), known: median(known), ratio: Number(ratio.toFixed(2)), within: ratio >= 0.5 && ratio <= 2 }).toMatchObject({ within: true });
});
