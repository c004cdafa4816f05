/**
 * Communications invariants, on both document stores, with two tenants (test/helpers/tenants.ts):
 * - an email's `From` is at one of its tenant's domains or a sender the platform allows (TOUCH_EMAIL_SENDERS):
 *   tenant a writing as b's domain or an outside one answers 400, on every path that writes `from` (send, create,
 *   bulk create, patch, bulk patch), and nothing is recorded; line breaks (header injection) stay refused;
 * - the address guard's reason kept in a record a client reads (push-histories, smss, a CQRS config disabled by the
 *   dispatcher) says the destination is not allowed and its category, never what the host name resolved to.
 */
import { createECDH, randomBytes } from "crypto";
import jwt from "jsonwebtoken";
import { bootTenancy, ok, type Tenancy } from "../helpers/tenants";
import { errorBody } from "../helpers/auth";
import { waitForValue } from "../helpers/wait";

jest.setTimeout(180_000);

const q = (v: unknown) => encodeURIComponent(JSON.stringify(v));
const OTHER_TENANT = (d: string) => `from: b.example is not a domain of this tenant; send from one of its domains (${d}) or a sender the platform allows`;
const OUTSIDE = (d: string) => `from: evil.test is not a domain of this tenant; send from one of its domains (${d}) or a sender the platform allows`;
const ONE_ADDRESS = "from must be one email address (a display name is allowed)";
const LINE_BREAKS = "from must not contain line breaks or control characters";
/** What a client may read of a refused destination: the host it named, "not allowed", a category; no address. */
const LOOPBACK_REFUSED = "host localhost is not allowed: not a public address (loopback)";
const RESOLVED = /127\.0\.0\.1|::1|resolves/;

describe("touch invariants", () => {
	let t: Tenancy;
	beforeAll(async () => {
		// One address and one domain the platform lets every tenant send as.
		t = await bootTenancy({ touchEmailSenders: ["alerts@platform.example", "example.com"], webhookAllowPrivate: false });
	}, 180_000);
	afterAll(async () => {
		await t?.cleanup();
	});

	describe("an email's From stays within its tenant (finding 17)", () => {
		const email = (from: string, subject: string) => ({ provider: "nodemailer", to: ["someone@example.org"], from, subject, text: "hello" });
		const countOf = async (token: string, subject: string) => {
			const r = await t.as(token, "GET", `/touch/emails/count?query=${q({ subject })}`);
			expect(r.status).toBe(200);
			return r.body.total;
		};

		test("send: the tenant's own domain (any case, with a display name) and the configured senders are accepted", async () => {
			for (const from of ["noreply@a.example", "Tenant A <NoReply@A.Example>", "alerts@platform.example", "Platform <ops@example.com>"]) {
				const r = await t.as(t.a.admin.token, "POST", "/touch/emails/send", email(from, "accepted"));
				expect({ from, status: r.status }).toEqual({ from, status: 200 });
				expect(r.body.data).toMatchObject({ from, state: "QUEUED" });
			}
		});

		test("send: tenant a as b's domain, an outside domain, or a display-name trick answers 400 and records nothing", async () => {
			const cases: Array<[string, string]> = [
				["noreply@b.example", OTHER_TENANT("a.example")],
				["Tenant B <billing@B.EXAMPLE>", OTHER_TENANT("a.example")],
				["ceo@evil.test", OUTSIDE("a.example")],
				['"noreply@a.example" <ceo@evil.test>', OUTSIDE("a.example")],
				["other@platform.example", "from: platform.example is not a domain of this tenant; send from one of its domains (a.example) or a sender the platform allows"],
				["noreply@a.example, ceo@evil.test", ONE_ADDRESS],
				["noreply@a.example@evil.test", ONE_ADDRESS],
				["team: noreply@a.example;", ONE_ADDRESS],
				["not an address", ONE_ADDRESS],
				["noreply@a.example\r\nBcc: victim@evil.test", LINE_BREAKS],
				["Tenant A <noreply@a.example>\nReply-To: ceo@evil.test", LINE_BREAKS],
			];
			for (const [from, message] of cases) {
				const r = await t.as(t.a.admin.token, "POST", "/touch/emails/send", email(from, "refused-send"));
				expect({ from, status: r.status, body: r.body }).toEqual({ from, status: 400, body: errorBody(400, message) });
			}
			expect(await countOf(t.a.admin.token, "refused-send")).toBe(0);
		});

		test("tenant b is held to its own domains the same way", async () => {
			expect((await t.as(t.b.admin.token, "POST", "/touch/emails/send", email("noreply@b.example", "b-own"))).status).toBe(200);
			const r = await t.as(t.b.admin.token, "POST", "/touch/emails/send", email("noreply@a.example", "b-as-a"));
			expect({ status: r.status, body: r.body }).toEqual({
				status: 400,
				body: errorBody(400, "from: a.example is not a domain of this tenant; send from one of its domains (b.example) or a sender the platform allows"),
			});
		});

		test("create, bulk create, patch and bulk patch hold the same rule; the stored from is unchanged", async () => {
			const member = t.a.member.token;
			const r1 = await t.as(member, "POST", "/touch/emails", email("noreply@b.example", "refused-create"));
			expect({ status: r1.status, body: r1.body }).toEqual({ status: 400, body: errorBody(400, OTHER_TENANT("a.example")) });
			const r2 = await t.as(member, "POST", "/touch/emails/bulk", { items: [email("noreply@a.example", "refused-create"), email("ceo@evil.test", "refused-create")] });
			expect({ status: r2.status, body: r2.body }).toEqual({ status: 400, body: errorBody(400, OUTSIDE("a.example")) });
			expect(await countOf(member, "refused-create")).toBe(0);

			// A scheduled email (stays QUEUED while the test patches it).
			const later = new Date(Date.now() + 3600_000).toISOString();
			const created = (await ok(t.as(member, "POST", "/touch/emails", { ...email("noreply@a.example", "patched"), date: later }), "create")).data;
			const r3 = await t.as(member, "PATCH", `/touch/emails/${created.id}`, { from: "Tenant B <noreply@b.example>" });
			expect({ status: r3.status, body: r3.body }).toEqual({ status: 400, body: errorBody(400, OTHER_TENANT("a.example")) });
			const r4 = await t.as(member, "PATCH", `/touch/emails/bulk?query=${q({ id: created.id })}`, { from: "ceo@evil.test" });
			expect({ status: r4.status, body: r4.body }).toEqual({ status: 400, body: errorBody(400, OUTSIDE("a.example")) });
			const r5 = await t.as(member, "PATCH", `/touch/emails/${created.id}`, { from: "x@a.example\r\nBcc: victim@evil.test" });
			expect({ status: r5.status, body: r5.body }).toEqual({ status: 400, body: errorBody(400, LINE_BREAKS) });
			expect((await ok(t.as(member, "GET", `/touch/emails/${created.id}`), "get")).data.from).toBe("noreply@a.example");
			// Within the tenant's domains a patch goes through.
			expect((await ok(t.as(member, "PATCH", `/touch/emails/${created.id}`, { from: "Desk <desk@a.example>" }), "patch")).data.from).toBe("Desk <desk@a.example>");
		});
	});

	describe("a refused destination's reason tells no resolution result (finding 22)", () => {
		/** The document at `path` once `done` holds of it: its refusal is what the client reads, with no address in it. */
		const settled = (token: string, path: string, done: (d: any) => boolean) =>
			waitForValue(
				`${path} settled`,
				async () => {
					const d = (await t.as(token, "GET", path)).body.data;
					return d && done(d) && d;
				},
				20_000,
			);
		const refusal = (doc: unknown, said: string, expected: string) => {
			expect(said).toBe(expected);
			expect(JSON.stringify(doc)).not.toMatch(RESOLVED);
		};

		test("push-histories: a subscription on a host resolving to loopback fails with the category only", async () => {
			const token = t.a.admin.token;
			const ua = createECDH("prime256v1");
			ua.generateKeys();
			const keys = { p256dh: ua.getPublicKey().toString("base64url"), auth: randomBytes(16).toString("base64url") };
			const session = (jwt.decode(token) as any).session;
			const sub = (await ok(t.as(token, "POST", "/touch/pushes", { session, keys, endpoint: "http://localhost:9/push/1", expiration: 1_900_000_000 }), "subscribe")).data;
			const sent = (await ok(t.as(token, "POST", "/touch/pushes/send", { push: sub.id, title: "t", body: "b" }), "send push")).data;
			const id = sent.items[0].id;
			const h = await settled(token, `/touch/push-histories/${id}`, (d) => d.status === "FAILED");
			refusal(h, h.reason, `address ${LOOPBACK_REFUSED}`);
		});

		test("smss: a provider URL resolving to loopback fails with the category only", async () => {
			const token = t.a.admin.token;
			await ok(
				t.as(token, "POST", "/context/configs", { key: "SMS", eid: t.a.client.id, value: { kavenegar: { url: "http://localhost:9", key: "kav-key-of-a", from: "1000" } } }),
				"sms config",
			);
			const sms = (await ok(t.as(token, "POST", "/touch/smss/send", { provider: "kavenegar", receptors: ["+14155550123"], message: "m" }), "send sms")).data;
			const d = await settled(token, `/touch/smss/${sms.id}`, (r) => r.state === "FAILED");
			refusal(d, d.reason, `address ${LOOPBACK_REFUSED}`);
		});

		test("a CQRS webhook on such a host: the config's disabled_reason tells the category only", async () => {
			const token = t.b.admin.token;
			const cfg = (await ok(t.as(token, "POST", "/context/configs", { key: "CQRS", eid: t.b.client.id, value: { webhook: "http://localhost:9/hook" } }), "cqrs config")).data;
			const after = await settled(token, `/context/configs/${cfg.id}`, (r) => r.value?.active === false);
			refusal(after, after.value.disabled_reason, `webhook refused: webhook ${LOOPBACK_REFUSED}`);
		});
	});
});
