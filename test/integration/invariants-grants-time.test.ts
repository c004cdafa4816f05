/**
 * Grant time windows cannot hold the platform (docs/security.md, "Grant time windows"; docs/contracts.md "Liveness": one request never
 * delays /status by more than 100 ms). A tenant admin wrote one grant with 1 000 sparse windows (29 February at odd
 * minutes): creating it held every tenant 3.9 s, each /auth/can with a timezone not seen before 10 to 33 s, and the
 * schedule cache turned over so it repeated. Now a grant holds at most 16 windows, a window is decided by field
 * matching (never by iterating the schedule), and its tables live with the grant index.
 */
import { bootTenancy, ok, type Tenancy } from "../helpers/tenants";
import { describeProbe, expectStatusHeldUnder, startStatusProbe } from "../helpers/status-probe";

/**
 * `n` windows that fire on 29 February only (every four years), at a different minute and hour each; `shift` makes
 * a run use expressions the process has not seen (the schedule cache is per process).
 */
const sparse = (n: number, shift: number) => Array.from({ length: n }, (_, i) => ({ cron_exp: `${(i + shift) % 60}-59/59 ${(i + shift) % 24} 29 2 *`, duration: 60 }));
/** Timezones the process has not evaluated yet. */
const ZONES = ["Asia/Kabul", "America/Caracas", "Pacific/Marquesas", "Africa/Cairo", "Australia/Eucla", "America/Havana", "Asia/Yangon", "Europe/Lisbon"];

describe("grant time windows", () => {
	let t: Tenancy;
	beforeAll(async () => {
		t = await bootTenancy();
	}, 180_000);
	afterAll(() => t?.cleanup());

	const zones = ZONES;
	const shift = 20;
	const timeGrant = (time: unknown) => t.as(t.a.admin.token, "POST", "/auth/grants", { subject: `@editor@${t.a.domain}`, action: "read", object: "content:notes", time });

	test("a grant holds at most 16 windows: 17 answer 400 naming the limit, and nothing is stored", async () => {
		const r = await timeGrant(sparse(17, shift));
		expect([r.status, r.body.message]).toEqual([400, "time: at most 16 windows per grant (got 17)"]);
		const list = await ok(t.as(t.a.admin.token, "GET", `/auth/grants?query=${encodeURIComponent(JSON.stringify({ object: "content:notes" }))}`), "grants");
		expect(list.items.filter((g: { time?: unknown[] }) => Array.isArray(g.time) && g.time.length === 17)).toEqual([]);
	});

	test("16 sparse windows: writing the grant and /auth/can in 8 new timezones each hold /status under 100 ms, with the right answers", async () => {
		const probe = startStatusProbe(t.p.url);
		const created = await timeGrant(sparse(16, shift));
		expect(created.status).toBe(200);
		const answers: unknown[] = [];
		for (const tz of zones) {
			const r = await t.as(t.a.member.token, "POST", "/auth/can", { action: "read", object: "content:notes", strict: "obj", tz });
			answers.push([tz, r.status, r.body.data?.granted]);
		}
		const r = await expectStatusHeldUnder(probe, 100);
		console.log(`grant with 16 sparse windows, then /auth/can in ${zones.length} new timezones: ${describeProbe(r)}`);
		// None of the windows is open now (they open on 29 February only); tenant a's member holds the grant.
		expect(answers).toEqual(zones.map((tz) => [tz, 200, false]));
		// A window open now opens the grant: evaluation still answers.
		await ok(timeGrant([...sparse(15, shift), { cron_exp: "* * * * *", duration: 120 }]), "open grant");
		const open = await t.as(t.a.member.token, "POST", "/auth/can", { action: "read", object: "content:notes", strict: "obj", tz: "Asia/Kolkata" });
		expect(open.body.data.granted).toBe(true);
		// Tenant b was never concerned: its member reads its notes.
		expect((await t.as(t.b.member.token, "GET", "/content/notes")).status).toBe(200);
	});
});
