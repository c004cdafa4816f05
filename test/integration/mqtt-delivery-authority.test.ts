/**
 * Issue 31 finding 4: the embedded broker decides every message at delivery with the subscriber's current token and
 * grants (docs/mqtt.md, "Each message, decided at delivery"), over TCP and over the gateway's `/mqtt` WebSocket, on
 * both document stores, with two tenants:
 * - the grant deleted after SUBSCRIBE: no later change reaches the owner or the client topic;
 * - the grant narrowed to `field: ["title"]` after SUBSCRIBE: messages still arrive, without `content`; a new SUBSCRIBE
 *   is refused (only unrestricted grants subscribe);
 * - a token that stops being valid (logout, deactivated user, expiry) is disconnected within 2 s;
 * - the other tenant receives nothing of it.
 */
import { randomBytes } from "crypto";
import mqtt, { type MqttClient } from "mqtt";
import { bootTenancy, ok, type Tenancy, type Tenant } from "../helpers/tenants";
import { keysOf } from "../helpers/auth";
import { subscribe } from "../helpers/mqtt-client";
import { sleep } from "../helpers/wait";
import { JwtKeys } from "../../lib/tokens";

jest.setTimeout(120_000);

interface Received {
	topic: string;
	body: any;
	text: string;
}

interface Sub {
	client: MqttClient;
	got: Received[];
	/** The first message (received or to come) matching `pred`; throws after `ms`. */
	next(pred: (m: Received) => boolean, what: string, ms?: number): Promise<Received>;
}

/** Milliseconds until the broker closes `c`, or null when it is still open after `ms`. */
function closedAfter(c: MqttClient, ms: number): Promise<number | null> {
	const t0 = performance.now();
	if (!c.connected) return Promise.resolve(0);
	return new Promise((resolve) => {
		const t = setTimeout(() => resolve(null), ms);
		c.once("close", () => (clearTimeout(t), resolve(performance.now() - t0)));
	});
}

describe("MQTT messages decided at delivery", () => {
	let T: Tenancy;
	let urls: Record<"tcp" | "websocket", string>;
	const open: MqttClient[] = [];

	beforeAll(async () => {
		T = await bootTenancy();
		urls = { tcp: (await T.p.broker.call<{ url: string }, object>("preserver.brokerUrl", {})).url, websocket: `${T.p.url.replace(/^http/, "ws")}/mqtt` };
	});
	afterEach(async () => {
		for (const c of open.splice(0)) await c.endAsync(true).catch(() => undefined);
	});
	afterAll(async () => {
		await T?.cleanup();
	});

	async function connect(url: string, username: string, password: string): Promise<Sub> {
		const client = await mqtt.connectAsync(url, { reconnectPeriod: 0, connectTimeout: 5000, clientId: `da-${randomBytes(6).toString("hex")}`, username, password }, false);
		open.push(client);
		const got: Received[] = [];
		const waiters = new Set<() => void>();
		client.on("message", (topic, payload) => {
			const text = payload.toString("utf8");
			got.push({ topic, text, body: JSON.parse(text) });
			for (const w of waiters) w();
		});
		return {
			client,
			got,
			next(pred, what, ms = 5000) {
				return new Promise((resolve, reject) => {
					const check = () => {
						const m = got.find(pred);
						if (!m) return false;
						waiters.delete(check);
						clearTimeout(t);
						resolve(m);
						return true;
					};
					const t = setTimeout(() => (waiters.delete(check), reject(new Error(`no message ${what} within ${ms} ms (got: ${got.map((m) => m.topic).join(", ") || "none"})`))), ms);
					if (!check()) waiters.add(check);
				});
			},
		};
	}

	/** A user of tenant `t` with a write grant of its own on content:notes (unrestricted, so it may subscribe). */
	async function writer(t: Tenant, name: string) {
		const username = `${name}-${randomBytes(3).toString("hex")}`;
		const password = `pw-${username}-Secret1`;
		const u = (await ok(T.as(t.clientToken, "POST", "/identity/users", { username, password, subjects: [] }), "user")).data;
		const grant = await T.grant(t.admin.token, { subject: `${u.id}@${t.domain}`, action: "write", object: "content:notes" });
		return { id: u.id as string, username, password, grantId: grant.id as string, token: await T.login(t, username, password) };
	}

	const ownerTopic = (id: string) => `platform/owner/${id}/content/notes/#`;
	const clientTopic = (t: Tenant) => `platform/client/${t.client.id}/content/notes/#`;
	const note = async (token: string, body: Record<string, unknown>) => (await ok(T.as(token, "POST", "/content/notes", body), "create note")).data;
	/** The tenant admin patches any note of its tenant (client zone). */
	const adminPatch = (t: Tenant, id: string, body: Record<string, unknown>) =>
		ok(T.as(t.admin.token, "PATCH", `/content/notes/${id}`, body, { "x-zone": "client" }), "admin patch");
	const about = (id: string) => (m: Received) => m.body.id === id;

	/** Tenant b's member, on its own owner and client topics: it must receive nothing of tenant a. */
	async function otherTenant(url: string): Promise<Sub> {
		const b = await connect(url, T.b.member.id, T.b.member.token);
		expect(await subscribe(b.client, ownerTopic(T.b.member.id))).toBe(1);
		expect(await subscribe(b.client, clientTopic(T.b))).toBe(1);
		expect(await subscribe(b.client, clientTopic(T.a))).toBe(128);
		return b;
	}

	describe.each(["tcp", "websocket"] as const)("over %s", (transport) => {
		test("the subscriber's grant deleted after SUBSCRIBE: no later change reaches its owner or client topic; the other tenant gets nothing", async () => {
			const url = urls[transport];
			const u = await writer(T.a, "gone");
			const mine = await note(u.token, { title: "mine", content: "c0" });
			const s = await connect(url, u.id, u.token);
			expect(await subscribe(s.client, ownerTopic(u.id))).toBe(1);
			expect(await subscribe(s.client, clientTopic(T.a))).toBe(1);
			// A subscriber whose grant stays (the member, role @editor), on the same client topic: the messages are sent.
			const control = await connect(url, T.a.member.id, T.a.member.token);
			expect(await subscribe(control.client, clientTopic(T.a))).toBe(1);
			const b = await otherTenant(url);

			// While the grant holds, both topics deliver.
			await adminPatch(T.a, mine.id, { title: "seen" });
			await s.next((m) => m.topic === `platform/owner/${u.id}/content/notes/${mine.id}` && m.body.after?.title === "seen", "on the owner topic");
			const m1 = await note(T.a.member.token, { title: "m1", content: "member's" });
			await s.next((m) => m.topic === `platform/client/${T.a.client.id}/content/notes/${m1.id}`, "on the client topic");

			await ok(T.as(T.a.admin.token, "DELETE", `/auth/grants/${u.grantId}`), "delete grant");
			const refused = await T.as(u.token, "GET", `/content/notes/${mine.id}`);
			expect(refused.status).toBe(403);
			expect(refused.body).toEqual({ statusCode: 403, message: "no grant for read on content:notes", error: "Forbidden" });

			const before = s.got.length;
			await adminPatch(T.a, mine.id, { title: "after the grant", content: "not for you" });
			const m2 = await note(T.a.member.token, { title: "m2", content: "not for you either" });
			await control.next(about(m2.id), "m2 for the control subscriber");
			await control.next((m) => m.body.id === mine.id && m.body.after?.title === "after the grant", "the patch for the control subscriber");
			await sleep(2000);
			expect(s.got.slice(before)).toEqual([]);
			expect(s.client.connected).toBe(true);
			expect(b.got).toEqual([]);
		});

		test('the grant narrowed to field ["title"] after SUBSCRIBE: messages arrive without `content`; a new SUBSCRIBE is refused', async () => {
			const url = urls[transport];
			const u = await writer(T.a, "narrow");
			// The note's create is published (decided under the full grant) before `s` subscribes: a message that
			// arrived after SUBSCRIBE but was decided before the grant narrowed would rightly carry `content`.
			const control = await connect(url, T.a.member.id, T.a.member.token);
			expect(await subscribe(control.client, clientTopic(T.a))).toBe(1);
			const mine = await note(u.token, { title: "t0", content: "c0" });
			await control.next(about(mine.id), "the note's create for the control subscriber");
			const s = await connect(url, u.id, u.token);
			expect(await subscribe(s.client, ownerTopic(u.id))).toBe(1);
			expect(await subscribe(s.client, clientTopic(T.a))).toBe(1);
			const b = await otherTenant(url);

			await ok(T.as(T.a.admin.token, "PATCH", `/auth/grants/${u.grantId}`, { field: ["title"] }), "narrow grant");
			expect((await ok(T.as(u.token, "GET", `/content/notes/${mine.id}`), "get")).data).toEqual({ id: mine.id, title: "t0" });
			// SUBSCRIBE keeps its rule: a field-limited grant does not subscribe.
			const fresh = await connect(url, u.id, u.token);
			expect(await subscribe(fresh.client, ownerTopic(u.id))).toBe(128);

			await adminPatch(T.a, mine.id, { title: "t1", content: "hidden after" });
			const own = await s.next((m) => m.topic === `platform/owner/${u.id}/content/notes/${mine.id}` && m.body.op === "u", "the patch on the owner topic");
			expect(own.body.before).toEqual({ id: mine.id, title: "t0" });
			expect(own.body.after).toEqual({ id: mine.id, title: "t1" });
			expect(own.body).toMatchObject({ id: mine.id, op: "u", topic: "content.notes", source: { db: "content", collection: "notes" } });
			const m3 = await note(T.a.member.token, { title: "t3", content: "member secret" });
			const viaClient = await s.next((m) => m.topic === `platform/client/${T.a.client.id}/content/notes/${m3.id}`, "the member's note on the client topic");
			expect(viaClient.body.after).toEqual({ id: m3.id, title: "t3" });
			for (const m of s.got) {
				expect(m.text).not.toContain('"content":');
				expect(m.text).not.toMatch(/hidden after|member secret/);
			}
			expect(b.got).toEqual([]);
		});

		test("a token that stops being valid is disconnected within 2 s: logout, a deactivated user, an expired token", async () => {
			const url = urls[transport];
			const u = await writer(T.a, "leaving");
			const b = await otherTenant(url);

			const loggedIn = await T.login(T.a, u.username, u.password);
			const s1 = await connect(url, u.id, loggedIn);
			expect(await subscribe(s1.client, ownerTopic(u.id))).toBe(1);
			const closing1 = closedAfter(s1.client, 2500);
			await ok(T.as(loggedIn, "GET", "/auth/logout"), "logout");
			const afterLogout = await closing1;
			expect(afterLogout).toEqual(expect.any(Number));

			// A token that expires while connected, with no message to deliver meanwhile.
			const claims = JSON.parse(Buffer.from(u.token.split(".")[1], "base64url").toString("utf8"));
			const { iat: _iat, exp: _exp, ...rest } = claims;
			const short = new JwtKeys(keysOf(T.p).jwtSecret).sign(rest, 2);
			const s2 = await connect(url, u.id, short);
			expect(await subscribe(s2.client, ownerTopic(u.id))).toBe(1);
			const expiresIn = JSON.parse(Buffer.from(short.split(".")[1], "base64url").toString("utf8")).exp * 1000 - Date.now();
			const closed2 = await closedAfter(s2.client, expiresIn + 2500);
			expect(closed2).not.toBeNull();
			const afterExpiry = closed2! - expiresIn;
			expect(afterExpiry).toBeLessThan(2000);

			const s3 = await connect(url, u.id, u.token);
			expect(await subscribe(s3.client, ownerTopic(u.id))).toBe(1);
			const closing3 = closedAfter(s3.client, 2500);
			await ok(T.as(T.a.clientToken, "PATCH", `/identity/users/${u.id}`, { status: "INACTIVE" }), "deactivate");
			const afterDeactivation = await closing3;
			expect(afterDeactivation).toEqual(expect.any(Number));
			console.log(
				`mqtt over ${transport}: closed ${afterLogout!.toFixed(0)} ms after the logout began, ${afterExpiry.toFixed(0)} ms after the expiry, ${afterDeactivation!.toFixed(0)} ms after the deactivation began`,
			);
			expect(b.client.connected).toBe(true);
			expect(b.got).toEqual([]);
		});
	});
});
